#include "collectives/transport/shm/internal/cma.h"

#include <errno.h>
#include <sys/prctl.h>
#include <sys/uio.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/posix.h"

namespace loom {
namespace shm_internal {

void AllowCmaFromAnyProcess() {
  // EINVAL without Yama, where nothing needs allowing.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

absl::Status ReadFromProcess(pid_t pid, uint64_t remote_address,
                             absl::Span<std::byte> destination) {
  size_t done = 0;
  while (done < destination.size()) {
    iovec local{destination.data() + done, destination.size() - done};
    iovec remote{reinterpret_cast<void*>(remote_address + done), destination.size() - done};
    const ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got > 0) {
      done += static_cast<size_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    const int error = got < 0 ? errno : EFAULT;  // 0 bytes with no error: nothing readable.
    const std::string what =
        absl::StrCat("process_vm_readv(pid ", pid, ", 0x", absl::Hex(remote_address + done), ", ",
                     destination.size() - done, " bytes) failed: ", StrError(error));
    if (error == ESRCH) return absl::UnavailableError(what);
    if (error == EPERM) return absl::PermissionDeniedError(what);
    return absl::InternalError(what);
  }
  return absl::OkStatus();
}

}  // namespace shm_internal
}  // namespace loom
