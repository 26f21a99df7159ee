#!/bin/sh
# The linker cargo calls on x86_64 Linux (.cargo/config.toml): the C compiler driver, as rustc's
# default is, but linking with the toolchain's own lld (rust-lld, which rustup ships with every
# toolchain) instead of GNU ld. The test binaries are 100 to 230 MB each and there are twenty:
# lld links them in a fraction of ld's time. Without rust-lld, plain `cc`, as before.
gcc_ld="$(rustc --print sysroot 2>/dev/null)/lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld"
if [ -x "$gcc_ld/ld.lld" ]; then
  exec cc -B "$gcc_ld" -fuse-ld=lld "$@"
fi
exec cc "$@"
