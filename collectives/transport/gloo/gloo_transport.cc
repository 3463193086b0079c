#include "collectives/transport/gloo/gloo_transport.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/transport/gloo/internal/endpoint.h"
#include "collectives/transport/gloo/internal/gloo_call.h"

namespace loom {
namespace {

absl::Status Validate(const GlooOptions& options) {
  if (options.size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: size ", options.size, " is below 1"));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", options.rank, " is outside [0, ", options.size, ")"));
  }
  if (options.store == nullptr) {
    if (options.store_dir.empty()) {
      return absl::InvalidArgumentError(
          "gloo: neither store_dir nor store names a rendezvous store");
    }
    struct stat info;
    if (stat(options.store_dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gloo: store_dir \"", options.store_dir, "\" is not an existing directory"));
    }
  }
  if (options.prefix.empty()) return absl::InvalidArgumentError("gloo: prefix is empty");
  if (options.hostname.empty() && options.interface.empty()) {
    return absl::InvalidArgumentError("gloo: neither hostname nor interface is set");
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: connect_timeout ",
                                                   absl::FormatDuration(options.connect_timeout),
                                                   " is not positive"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectGlooTransport(const GlooOptions& options) {
  if (absl::Status valid = Validate(options); !valid.ok()) return valid;
  std::shared_ptr<gloo::rendezvous::Context> context;
  const absl::Status connected = gloo_internal::GlooCall(
      absl::StrCat("connecting rank ", options.rank, " of ", options.size, " (prefix \"",
                   options.prefix, "\")"),
      [&] {
        gloo::transport::tcp::attr attr;
        if (options.interface.empty()) {
          attr.hostname = options.hostname;
        } else {
          attr.iface = options.interface;
        }
        // GlooCall blocks SIGPIPE in this thread, so gloo's event-loop thread, which
        // the device starts here, inherits the blocked mask for life: its writes into
        // a reset socket fail with EPIPE instead of killing the process (sigpipe.h).
        std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
        std::unique_ptr<gloo::rendezvous::FileStore> file_store;
        gloo::rendezvous::Store* store = options.store;
        if (store == nullptr) {
          file_store = std::make_unique<gloo::rendezvous::FileStore>(options.store_dir);
          store = file_store.get();
        }
        gloo::rendezvous::PrefixStore prefixed(options.prefix, *store);
        context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
        context->setTimeout(
            std::chrono::milliseconds(absl::ToInt64Milliseconds(options.connect_timeout)));
        context->connectFullMesh(prefixed, device);
      });
  if (!connected.ok()) return connected;
  return std::unique_ptr<Transport>(
      std::make_unique<gloo_internal::Endpoint>(std::move(context), options));
}

}  // namespace loom
