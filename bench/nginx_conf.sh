# shellcheck shell=bash
# Sourced by bench/common.sh and scripts/pgo.sh: nginx configurations the benchmarks
# share. Defines functions only; starts nothing.

# nginx_head DIR: what every bench nginx.conf starts with (one worker in the
# foreground; its pid, error log and temporary files under DIR), up to and into its
# http block, which the caller goes on writing and closes.
nginx_head() {
  cat <<EOC
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; }
http {
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
EOC
}

# grpc_upstream_files DIR H2C_PORT H1_PORT: the gRPC upstream's files in DIR: an
# nginx.conf answering every unary call to bench.Orders and bench.Plain with one
# framed message and grpc-status 0 in the trailers (a static file: as lean an upstream
# as the HTTP/1.1 one), over h2c on H2C_PORT and the same answers over HTTP/1.1 on
# H1_PORT; and a framed call in DIR/call.bin. Run it with `nginx -c DIR/nginx.conf -p DIR`.
grpc_upstream_files() {
  mkdir -p "$1/root/bench.Orders" "$1/root/bench.Plain"
  python3 - "$1" <<'EOP'
import struct, sys
framed = lambda m: b"\x00" + struct.pack(">I", len(m)) + m  # gRPC's length prefix
for service in ("bench.Orders", "bench.Plain"):
    open("%s/root/%s/Create" % (sys.argv[1], service), "wb").write(framed(b"created:ord_1"))
open(sys.argv[1] + "/call.bin", "wb").write(framed(b'{"amount":1000,"currency":"eur"}'))
EOP
  { nginx_head "$1"; cat <<EOC; } >"$1/nginx.conf"
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$2 http2;
    listen 127.0.0.1:$3;
    location / {
      # The call's message is read whole before the answer, as a gRPC server reads
      # its request. A static file alone answers first and then resets the stream
      # (RST_STREAM NO_ERROR) to discard the body, and that late frame on a kept-alive
      # connection made nginx's grpc_pass fail 1-3 % of calls ("upstream sent frame
      # for unknown stream"), which no real server would cause.
      mirror /read-body;
      mirror_request_body on;
      root $1/root;
      default_type application/grpc;
      add_trailer grpc-status 0 always;
      error_page 405 =200 \$uri;  # a POST to a static file
    }
    location = /read-body { internal; return 204; }
  }
}
EOC
}
