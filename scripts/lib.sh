# lib.sh - shell functions shared by the scripts (sourced, never run).

# Closes every file descriptor above 2 of the calling (sub)shell. Call it in the subshell that
# then starts a daemon: the caller's open files and locks must not live on in the daemon
# (a lock held by a caller of `make run` stayed held by the server for its whole life).
close_inherited_fds() {
    local fd
    for fd in /proc/self/fd/*; do
        fd=${fd##*/}
        [[ $fd =~ ^[0-9]+$ ]] && ((fd > 2)) || continue
        eval "exec $fd>&-" 2>/dev/null || true
    done
}
