# bench/nginx.sh - sourced by the bench scripts.
#   nginx_conf WORK LISTEN BODY   writes WORK/nginx.conf: one worker returning BODY on LISTEN
#                                 (an address:port or a port), its files under WORK
#   start_nginx WORK PORT CPU BODY  that, on 127.0.0.1:PORT, started pinned to CPU (unpinned when
#                                 CPU is empty); sets NGINX_PID and returns once it answers
nginx_conf() {
  local work=$1 listen=$2 body=$3
  cat > "$work/nginx.conf" <<NGINX
worker_processes 1;
worker_rlimit_nofile 65536;
user root;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 16384; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 65s;
  default_type text/plain; server_tokens off;
  client_body_temp_path $work/b; proxy_temp_path $work/p; fastcgi_temp_path $work/f;
  uwsgi_temp_path $work/u; scgi_temp_path $work/s;
  server { listen $listen backlog=4096; location / { return 200 "$body"; } }
}
NGINX
}

start_nginx() {
  local work=$1 port=$2 cpu=$3 body=$4
  nginx_conf "$work" "127.0.0.1:$port" "$body"
  if [ -n "$cpu" ]; then
    taskset -c "$cpu" nginx -p "$work" -c "$work/nginx.conf" -e "$work/error.log" -g 'daemon off;' &
  else
    nginx -p "$work" -c "$work/nginx.conf" -e "$work/error.log" -g 'daemon off;' &
  fi
  NGINX_PID=$!
  for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && return 0; sleep 0.1; done
  echo "nginx did not start" >&2
  cat "$work/error.log" >&2
  return 1
}
