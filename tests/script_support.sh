# Sourced by the shell tests and scripts/soak.sh.

# Prints a TCP port on 127.0.0.1 that is free right now.
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# make_test_certificates DIR: a CA (ca.pem), a server certificate for localhost / 127.0.0.1
# (server.pem, server.key) and a client certificate (client.pem, client.key) in DIR.
make_test_certificates() {
  (
    cd "$1"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=tlpd test CA" \
      -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key \
      -out server.csr 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > san.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile san.ext -out server.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=tlpctl" -keyout client.key \
      -out client.csr 2>/dev/null
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -out client.pem 2>/dev/null
  )
}

# await_metrics ADDRESS OUT PATTERN...: scrapes http://ADDRESS/metrics into OUT until it has a
# line matching each PATTERN (grep -E), for up to 10 s: tlpd exports most series once a second,
# so a scrape right after a change may not show it yet. Returns 1 (naming the pattern) if not.
await_metrics() {
  local address=$1 out=$2 pattern missing
  shift 2
  for _ in $(seq 50); do
    /usr/bin/python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('http://$address/metrics').read().decode())" \
      > "$out" || true
    missing=""
    for pattern in "$@"; do grep -qE "$pattern" "$out" || missing=$pattern; done
    [[ -z $missing ]] && return 0
    sleep 0.2
  done
  echo "/metrics at $address lacks a line matching: $missing" >&2
  return 1
}
