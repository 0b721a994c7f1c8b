#!/usr/bin/env bash
# A real single-node SLURM cluster for CI / local tests (Debian 12, run as root, no systemd).
#
# Mode B of docs "slurm-single-node": munged + MariaDB + slurmdbd + slurmctld + slurmd, all as
# plain background processes, so `sacct` works and snakemake-executor-plugin-slurm can use its
# default (sacct-based) status checks and account validation.
#
# Usage: bash tests/slurm/cluster.sh {install|start|stop|status}
#   install  apt-get the Debian packages (skipped when already installed)
#   start    (re)start every daemon from a clean slurmctld/slurmd state, create account
#            ci_account + user root, run a smoke `sbatch --wait`; PIDs go to $SLURM_STATE_DIR
#   stop     stop the recorded daemons by PID (SIGTERM, up to 15 s, then SIGKILL)
#   status   which recorded daemons are alive, plus sinfo / squeue
#
# Environment:
#   SLURM_STATE_DIR     where PIDs and smoke-job output go (default /tmp/anyjev-slurm)
#   SLURM_WAIT_TIMEOUT  seconds each start-up wait may take before failing (default 60)
#   SLURM_ACCOUNT       account to create (default ci_account); partition is always "debug"
#
# Only processes this script started (and recorded with their start time) are ever signalled.
set -euo pipefail

STATE_DIR=${SLURM_STATE_DIR:-/tmp/anyjev-slurm}
WAIT_TIMEOUT=${SLURM_WAIT_TIMEOUT:-60}
STOP_TIMEOUT=15
ACCOUNT=${SLURM_ACCOUNT:-ci_account}
CLUSTER=ci
LOG_DIR=/var/log/slurm
MUNGE_LOG=/var/log/munge/munged.log
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
# stop order (reverse of start order)
DAEMONS=(slurmd slurmctld slurmdbd mariadbd munged)
STALE_PIDFILES=(/run/slurmctld.pid /run/slurmd.pid /run/slurmdbd.pid /run/munge/munged.pid
                /run/mysqld/mysqld.pid)

log() { printf '[cluster.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root"; }

# ---------------------------------------------------------------- process helpers
# proc_state PID -> one-letter state (R, S, Z, ...) or empty when the PID does not exist.
proc_state() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }          # drop "pid (comm) ", comm may contain spaces
    printf '%s' "${stat%% *}"
}
# proc_starttime PID -> field 22 of /proc/PID/stat (clock ticks since boot), to detect PID reuse.
proc_starttime() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    # after "comm) " the fields start at field 3; starttime is field 22 -> index 20 here
    awk '{ print $20 }' <<<"$stat"
}
# alive PID: exists and is not a zombie (PID 1 here reaps orphans late, so Z counts as gone).
alive() {
    local s
    s=$(proc_state "$1")
    [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ]
}
pidfile_of() { printf '%s/%s.pid' "$STATE_DIR" "$1"; }
# record NAME PID: store "PID STARTTIME" so stop never signals a recycled PID.
record() {
    local name=$1 pid=$2
    printf '%s %s\n' "$pid" "$(proc_starttime "$pid")" >"$(pidfile_of "$name")"
    log "$name started, pid $pid"
}
# recorded_pid NAME -> PID if recorded and still the same live process, else empty.
recorded_pid() {
    local f pid st
    f=$(pidfile_of "$1")
    [ -r "$f" ] || return 0
    read -r pid st <"$f" || return 0
    [ -n "${pid:-}" ] || return 0
    if alive "$pid" && [ "$(proc_starttime "$pid")" = "${st:-}" ]; then
        printf '%s' "$pid"
    fi
}

# wait_until DESC LOGFILE CMD...: poll CMD every 0.25 s for up to WAIT_TIMEOUT s; on timeout
# print the daemon's last log lines and fail.
wait_until() {
    local desc=$1 logfile=$2 t0 deadline
    shift 2
    t0=$(now)
    deadline=$(( $(date +%s) + WAIT_TIMEOUT ))
    until "$@" >/dev/null 2>&1; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "timed out after ${WAIT_TIMEOUT}s waiting for: $desc"
            local f
            for f in $logfile; do
                [ -e "$f" ] || continue
                log "---- last lines of $f ----"
                tail -n 30 "$f" >&2 || true
            done
            die "$desc did not come up"
        fi
        sleep 0.25
    done
    log "$desc: ready after $(elapsed "$t0") s"
}
# check_comm NAME PID: the recorded PID must be the daemon itself (setsid did not fork).
check_comm() {
    local comm
    comm=$(cat "/proc/$2/comm" 2>/dev/null || true)
    [ "$comm" = "$1" ] || die "pid $2 is '$comm', not $1 (did setsid fork?)"
}
# check_alive NAME PID LOGFILE: fail early (with log) if a just-started daemon already died.
check_alive() {
    alive "$2" && return 0
    log "---- last lines of $3 ----"
    tail -n 30 "$3" >&2 || true
    die "$1 (pid $2) exited right after start"
}

# ---------------------------------------------------------------- install
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

cmd_install() {
    need_root
    local t0 missing=() p
    t0=$(now)
    for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
    if [ ${#missing[@]} -eq 0 ]; then
        log "install: all packages already installed (${PACKAGES[*]}), skipping"
        return 0
    fi
    log "install: missing ${missing[*]}"
    apt-get update
    log "install: apt-get update took $(elapsed "$t0") s"
    # No systemd here: the postinst scripts do not start any service (policy-rc.d / no init).
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${PACKAGES[@]}"
    log "install: done in $(elapsed "$t0") s"
}

# ---------------------------------------------------------------- config files
write_slurm_conf() {
    local node cpus memtotal_kb realmem
    node=$(hostname -s)
    cpus=$(nproc)
    memtotal_kb=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
    realmem=$(( memtotal_kb * 85 / 100 / 1024 ))   # must stay <= what `slurmd -C` reports
    install -d -m 0755 /etc/slurm
    cat >/etc/slurm/slurm.conf <<EOF
# Generated by tests/slurm/cluster.sh -- single-node CI cluster (mode B: slurmdbd accounting).
ClusterName=$CLUSTER
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
MinJobAge=300
InactiveLimit=0
KillWait=30
SlurmctldTimeout=120
SlurmdTimeout=300
Waittime=0
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$realmem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    log "wrote /etc/slurm/slurm.conf (NodeName=$node CPUs=$cpus RealMemory=$realmem)"
}

write_slurmdbd_conf() {
    install -m 0600 -o root -g root /dev/null /etc/slurm/slurmdbd.conf
    cat >/etc/slurm/slurmdbd.conf <<EOF
# Generated by tests/slurm/cluster.sh
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$LOG_DIR/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=slurmpw
EOF
    chmod 0600 /etc/slurm/slurmdbd.conf
}

# ---------------------------------------------------------------- start
munge_ok() { munge -n | unmunge; }
mariadb_ok() { mariadb-admin ping; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ctld_up() { scontrol ping | grep -q UP; }
node_idle() { sinfo -h -n "$(hostname -s)" -o %T | grep -qx idle; }

# Refuse to start next to daemons that this script did not start (we never kill those).
check_foreign() {
    local name pids pid foreign=()
    for name in "${DAEMONS[@]}" slurmstepd; do
        pids=$(pgrep -x "$name" || true)
        for pid in $pids; do
            alive "$pid" || continue
            [ "$(recorded_pid "$name")" = "$pid" ] && continue
            foreign+=("$name:$pid")
        done
    done
    if [ ${#foreign[@]} -gt 0 ]; then
        die "unrecorded daemons are running (${foreign[*]}); stop them yourself first"
    fi
}

cmd_start() {
    need_root
    local t_all t0 pid node
    t_all=$(now)
    for p in "${PACKAGES[@]}"; do installed "$p" || die "$p not installed; run: $0 install"; done

    # A previous run of ours: stop it first, so that start is a restart.
    local any=0 name
    for name in "${DAEMONS[@]}"; do [ -n "$(recorded_pid "$name")" ] && any=1; done
    if [ "$any" = 1 ]; then
        log "start: daemons from a previous start are still running; stopping them first"
        cmd_stop
    fi
    check_foreign

    # Clean stale state.
    t0=$(now)
    rm -rf "$STATE_DIR"
    mkdir -p "$STATE_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd /var/log/munge
    rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
    rm -f "${STALE_PIDFILES[@]}"
    # fresh logs, so that a failing wait shows only this run's lines
    : >"$LOG_DIR/slurmctld.log"; : >"$LOG_DIR/slurmd.log"; : >"$LOG_DIR/slurmdbd.log"
    write_slurm_conf
    write_slurmdbd_conf
    log "start: cleaned state and wrote configs in $(elapsed "$t0") s"

    # 1. munge (forks; its pid is in /run/munge/munged.pid)
    t0=$(now)
    [ -s /etc/munge/munge.key ] || { mungekey --create; chown munge:munge /etc/munge/munge.key; }
    install -d -o munge -g munge -m 0755 /run/munge
    chown munge:munge /var/log/munge
    runuser -u munge -- /usr/sbin/munged
    wait_until "munged pid file" "$MUNGE_LOG" test -s /run/munge/munged.pid
    pid=$(cat /run/munge/munged.pid)
    check_alive munged "$pid" "$MUNGE_LOG"
    record munged "$pid"
    wait_until "munge round trip" "$MUNGE_LOG" munge_ok
    log "start: munge up in $(elapsed "$t0") s"

    # 2. MariaDB
    t0=$(now)
    install -d -o mysql -g mysql -m 0755 /run/mysqld
    if [ ! -d /var/lib/mysql/mysql ]; then
        log "initialising MariaDB data dir"
        mariadb-install-db --user=mysql >"$LOG_DIR/mariadb-install-db.log" 2>&1 \
            || { tail -n 30 "$LOG_DIR/mariadb-install-db.log" >&2; die "mariadb-install-db failed"; }
    fi
    setsid /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 \
        --innodb-buffer-pool-size=256M --innodb-lock-wait-timeout=900 \
        </dev/null >"$LOG_DIR/mariadb.stdout" 2>&1 &
    pid=$!
    record mariadbd "$pid"
    wait_until "mariadbd ping" "$LOG_DIR/mariadb.stdout" mariadb_ok
    check_comm mariadbd "$pid"
    mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
      CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
    log "start: MariaDB up in $(elapsed "$t0") s"

    # 3. slurmdbd
    t0=$(now)
    setsid /usr/sbin/slurmdbd -D </dev/null >"$LOG_DIR/slurmdbd.stdout" 2>&1 &
    pid=$!
    record slurmdbd "$pid"
    wait_until "slurmdbd port 6819" "$LOG_DIR/slurmdbd.log $LOG_DIR/slurmdbd.stdout" port_open 6819
    check_alive slurmdbd "$pid" "$LOG_DIR/slurmdbd.log"
    check_comm slurmdbd "$pid"
    log "start: slurmdbd up in $(elapsed "$t0") s"

    # 4. slurmctld, slurmd
    t0=$(now)
    setsid /usr/sbin/slurmctld -D </dev/null >"$LOG_DIR/slurmctld.stdout" 2>&1 &
    pid=$!
    record slurmctld "$pid"
    wait_until "slurmctld ping UP" "$LOG_DIR/slurmctld.log $LOG_DIR/slurmctld.stdout" ctld_up
    check_comm slurmctld "$pid"
    log "start: slurmctld up in $(elapsed "$t0") s"

    t0=$(now)
    node=$(hostname -s)
    setsid /usr/sbin/slurmd -D </dev/null >"$LOG_DIR/slurmd.stdout" 2>&1 &
    pid=$!
    record slurmd "$pid"
    wait_until "node $node idle" "$LOG_DIR/slurmd.log $LOG_DIR/slurmd.stdout $LOG_DIR/slurmctld.log" node_idle
    check_comm slurmd "$pid"
    log "start: slurmd up, node idle in $(elapsed "$t0") s"

    # 5. accounting: slurmctld registers cluster "ci" by itself; the account survives restarts
    #    (it lives in MariaDB), so only add what is missing.
    t0=$(now)
    wait_until "cluster $CLUSTER registered in slurmdbd" "$LOG_DIR/slurmdbd.log $LOG_DIR/slurmctld.log" \
        cluster_registered
    if [ -z "$(sacctmgr -n -P show account "$ACCOUNT" format=Account)" ]; then
        sacctmgr -i add account "$ACCOUNT" Description=ci Organization=ci >/dev/null
    fi
    if [ -z "$(sacctmgr -n -P show assoc where user=root account="$ACCOUNT" cluster="$CLUSTER" format=User)" ]; then
        sacctmgr -i add user root Account="$ACCOUNT" >/dev/null
    fi
    # jobs submitted without -A then land on $ACCOUNT rather than on the built-in "root" account
    if [ "$(sacctmgr -n -P show user root format=DefaultAccount)" != "$ACCOUNT" ]; then
        sacctmgr -i modify user root set DefaultAccount="$ACCOUNT" >/dev/null
    fi
    log "start: account $ACCOUNT + user root ready in $(elapsed "$t0") s"

    # 6. smoke test
    t0=$(now)
    local out jobid
    out=$(timeout "$WAIT_TIMEOUT" sbatch --parsable --wait -A "$ACCOUNT" -p debug \
        -D "$STATE_DIR" -o "$STATE_DIR/smoke-%j.out" --wrap 'hostname') \
        || die "smoke sbatch --wait failed (see $LOG_DIR/slurmctld.log, $LOG_DIR/slurmd.log)"
    jobid=${out%%;*}
    log "start: smoke job $jobid printed '$(cat "$STATE_DIR/smoke-$jobid.out" 2>/dev/null)'" \
        "in $(elapsed "$t0") s"
    sinfo
    log "start: cluster up in $(elapsed "$t_all") s total (state in $STATE_DIR)"
}
cluster_registered() { sacctmgr -n -P show cluster format=Cluster | grep -qx "$CLUSTER"; }

# ---------------------------------------------------------------- stop
stop_one() {
    local name=$1 pid deadline
    pid=$(recorded_pid "$name")
    if [ -z "$pid" ]; then
        log "stop: $name not running (or not recorded)"
        rm -f "$(pidfile_of "$name")"
        return 0
    fi
    deadline=$(( $(date +%s) + STOP_TIMEOUT ))
    if [ "$name" = mariadbd ]; then
        # MariaDB 10.11 hangs for good (all threads in futex waits, later SIGTERMs ignored) when
        # SIGTERM arrives in its first ~0.2 s, before "ready for connections". That happens when
        # a start fails right after launching it, so let it finish starting up first.
        while alive "$pid" && ! mariadb-admin --connect-timeout=1 ping >/dev/null 2>&1 \
              && [ "$(date +%s)" -lt "$deadline" ]; do
            sleep 0.2
        done
    fi
    kill -TERM "$pid" 2>/dev/null || true
    while alive "$pid"; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "stop: $name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            local k=0
            while alive "$pid" && [ $k -lt 20 ]; do sleep 0.25; k=$((k + 1)); done
            break
        fi
        sleep 0.2
    done
    alive "$pid" && log "stop: WARNING $name (pid $pid) still alive" || log "stop: $name (pid $pid) stopped"
    rm -f "$(pidfile_of "$name")"
}

cmd_stop() {
    need_root
    local t0 name
    t0=$(now)
    # Cancel leftover jobs while slurmctld still runs, so no slurmstepd outlives slurmd.
    if [ -n "$(recorded_pid slurmctld)" ] && [ -n "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]; then
        log "stop: cancelling leftover jobs"
        timeout 10 scancel --full --user root 2>/dev/null || true
        local k=0
        while [ -n "$(timeout 5 squeue -h -t RUNNING,PENDING,COMPLETING -o %i 2>/dev/null)" ] && [ $k -lt 40 ]; do
            sleep 0.25; k=$((k + 1))
        done
    fi
    for name in "${DAEMONS[@]}"; do stop_one "$name"; done
    rm -f "${STALE_PIDFILES[@]}"
    local left
    left=$(pgrep -x slurmstepd || true)
    [ -n "$left" ] && log "stop: WARNING slurmstepd still running (pids $left), not ours to kill"
    log "stop: done in $(elapsed "$t0") s"
}

# ---------------------------------------------------------------- status
cmd_status() {
    local name pid rc=0
    for name in munged mariadbd slurmdbd slurmctld slurmd; do
        pid=$(recorded_pid "$name")
        if [ -n "$pid" ]; then
            printf '%-10s alive  pid %s\n' "$name" "$pid"
        else
            printf '%-10s down\n' "$name"; rc=1
        fi
    done
    if [ -n "$(recorded_pid slurmctld)" ]; then
        echo "--- sinfo"; timeout 10 sinfo || true
        echo "--- squeue"; timeout 10 squeue || true
    fi
    return $rc
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: $0 {install|start|stop|status}" >&2; exit 2 ;;
esac
