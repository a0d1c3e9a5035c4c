#!/bin/busybox sh
# PID 1 of the QEMU guests that `cargo xtask integration-test vm` boots (embedded
# into xtask at build time, copied to /init of each initramfs).
#
# Mounts what the tests need, loads veth and its dependencies, runs each test
# binary listed in /test/tests against the real object /test/lagran.o, prints
# one `LAGRAN-TEST:` line per binary and a final `LAGRAN-RESULT: PASS|FAIL` on
# the serial console, and powers off. The VM has no NIC (-nic none): all traffic
# stays inside the veth pairs and namespaces the tests create.
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
mount -t bpf bpf /sys/fs/bpf
mkdir -p /root /var && ln -s /run /var/run
echo "LAGRAN-GUEST: kernel $(uname -r), $(nproc) cpu(s), uptime $(cut -d' ' -f1 /proc/uptime)s"
rc=0
for m in $(cat /etc/modules.load); do
  insmod "$m" || { echo "LAGRAN-GUEST: insmod $m failed"; rc=1; }
done
# busybox-static prefers its own applets over $PATH, and busybox ip lacks netns/veth/xdp.
/usr/sbin/ip link set lo up
loads=yes
export LAGRAN_EBPF_OBJECT=/test/lagran.o LAGRAN_REQUIRE_TOOLS=1 RUST_BACKTRACE=1
for name in $(cat /test/tests); do
  if [ "$name" != xdp_kernel ] && [ "$loads" = no ]; then
    # Every other test loads the same object: each would print the whole verifier log again.
    echo "LAGRAN-TEST: $name FAIL skipped, the object does not load on this kernel"
    continue
  fi
  echo "LAGRAN-TEST-BEGIN: $name"
  t0=$(cut -d' ' -f1 /proc/uptime)
  "/test/bin/$name" --test-threads=1 --nocapture
  r=$?
  t1=$(cut -d' ' -f1 /proc/uptime)
  if [ $r -eq 0 ]; then
    echo "LAGRAN-TEST: $name PASS ($t0 -> $t1 s)"
  else
    echo "LAGRAN-TEST: $name FAIL exit $r ($t0 -> $t1 s)"
    rc=1
    [ "$name" = xdp_kernel ] && loads=no
  fi
done
if [ $rc -eq 0 ]; then echo "LAGRAN-RESULT: PASS"; else echo "LAGRAN-RESULT: FAIL"; fi
echo "LAGRAN-GUEST: uptime at end $(cut -d' ' -f1 /proc/uptime)s"
sync
poweroff -f
