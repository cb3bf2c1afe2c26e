# Loopback ports for the scripts' servers (sourced, not run).
# port: a free port on 127.0.0.1 (the kernel's pick; another process could take it before the
# caller binds it, which on a loopback test machine does not happen in practice).
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_port PORT: until something listens on PORT, 10 seconds at most (fails after that).
wait_port() { for _ in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 0.2)" 2>/dev/null && return 0; sleep 0.1; done; echo "nothing listens on $1" >&2; return 1; }
