# Sourced, not run: free_port prints a random port nobody listens on, nor on the one after it (a
# metrics listener's), below the kernel's range of ephemeral ports (an outgoing connection, or a
# client's socket waiting there after a run, would refuse the server's bind).
free_port() {
  local p low
  low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$low" -gt 21000 ] 2>/dev/null || low=30000
  while :; do
    p=$((20000 + RANDOM % (low - 20002)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null &&
      ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 1))") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
}
