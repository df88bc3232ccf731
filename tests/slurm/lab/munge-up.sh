#!/bin/sh
# munge-up.sh: start the machine's munged (SLURM's and PMIx's credentials)
# and wait until it answers: a key made when there is none, its run, log
# and state directories made, the daemon started as the munge user.
# Used by lab-up.sh and by tests/house/launch_munge.sh, which restarts it.
# Exit 0 when munged answers (`munge -n`) within 5 s of its start, 1
# otherwise (see /var/log/munge/munged.log).  Run as root.
if [ ! -s /etc/munge/munge.key ]; then
	dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
	chown munge:munge /etc/munge/munge.key
	chmod 400 /etc/munge/munge.key
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
timeout -k 1 30 runuser -u munge -- /usr/sbin/munged || exit 1
for _ in $(seq 1 50); do timeout -k 1 5 munge -n </dev/null >/dev/null 2>&1 && exit 0; sleep 0.1; done
exit 1
