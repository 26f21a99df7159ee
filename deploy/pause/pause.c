/* The sandbox ("pause") image of the test node: the process that holds a pod's namespaces
 * while its containers come and go. It does nothing but wait, and ends on SIGTERM or SIGINT
 * (the kubelet stops a sandbox with SIGTERM). Built static by scripts/install-k8s.sh and
 * packaged with scripts/oci-archive.sh, so the node needs no registry. */
#include <signal.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

int main(void) {
  signal(SIGTERM, stop);
  signal(SIGINT, stop);
  for (;;) pause();
}
