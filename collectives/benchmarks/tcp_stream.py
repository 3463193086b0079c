#!/usr/bin/env python3
"""One TCP stream's goodput between two hosts: the link's reference for link_speed.sh.

  tcp_stream.py server ADDRESS PORT BYTES   # on the receiving host
  tcp_stream.py client ADDRESS PORT BYTES   # on the sending host; prints MB/s
"""
import socket
import sys
import time


def main():
    mode, address, port, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "server":
        with socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((address, port))
            listener.listen(1)
            connection, _ = listener.accept()
            with connection:
                buffer = bytearray(1 << 20)
                received = 0
                while received < total:
                    got = connection.recv_into(buffer)
                    if got == 0:
                        break
                    received += got
                connection.sendall(b"x")  # the client's clock stops when all arrived
        return
    with socket.create_connection((address, port)) as connection:
        block = b"\0" * (1 << 20)
        start = time.monotonic()
        sent = 0
        while sent < total:
            connection.sendall(block)
            sent += len(block)
        connection.recv(1)
        seconds = time.monotonic() - start
    print(f"one TCP stream: {sent} bytes in {seconds * 1e3:.1f} ms = {sent / seconds / 1e6:.1f} MB/s")


if __name__ == "__main__":
    main()
