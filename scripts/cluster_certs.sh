#!/usr/bin/env bash
# TLS for Erlang distribution between SoulMem nodes: a small CA, one
# certificate per node, and the ssl_dist_optfile each node starts with.
#
#   bash scripts/cluster_certs.sh DIR NODE_HOST...
#   bash scripts/cluster_certs.sh /etc/soulmem/tls 192.168.1.20 192.168.1.21
#
# Writes DIR/ca.pem (+ ca.key: keep it off the nodes), DIR/<host>.pem and
# DIR/<host>.key, and DIR/<host>.ssl_dist.conf for each host. Copy ca.pem,
# the host's .pem/.key and .conf to that host and start it with
#   ELIXIR_ERL_OPTIONS="-proto_dist inet_tls -ssl_dist_optfile /etc/soulmem/tls/<host>.ssl_dist.conf"
# Both sides verify the peer's certificate against the CA (verify_peer and
# fail_if_no_peer_cert), so a machine without a CA-signed certificate cannot
# join even with the cookie. Uses Debian's openssl.
set -euo pipefail

if [ "$#" -lt 2 ]; then
  echo "usage: $0 DIR NODE_HOST..." >&2
  exit 2
fi

dir=$1
shift
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"

if [ ! -f ca.pem ]; then
  openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -sha256 \
    -subj "/CN=SoulMem cluster CA" -keyout ca.key -out ca.pem 2>/dev/null
  chmod 600 ca.key
fi

for host in "$@"; do
  case "$host" in
    *[!A-Za-z0-9.:-]*) echo "not a host name or address: $host" >&2; exit 2 ;;
  esac
  if [[ "$host" =~ ^[0-9.]+$ || "$host" == *:* ]]; then san="IP:$host,DNS:$host"; else san="DNS:$host"; fi
  # (OTP checks the name it dialled against the DNS entries, also for an address.)

  openssl req -newkey rsa:3072 -nodes -sha256 -subj "/CN=$host" \
    -keyout "$host.key" -out "$host.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" > "$host.ext"
  openssl x509 -req -in "$host.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 \
    -sha256 -extfile "$host.ext" -out "$host.pem" 2>/dev/null
  rm -f "$host.csr" "$host.ext"
  chmod 600 "$host.key"

  cat > "$host.ssl_dist.conf" <<CONF
[{server, [{certfile, "$PWD/$host.pem"},
           {keyfile, "$PWD/$host.key"},
           {cacertfile, "$PWD/ca.pem"},
           {verify, verify_peer},
           {fail_if_no_peer_cert, true},
           {secure_renegotiate, true},
           {versions, ['tlsv1.3', 'tlsv1.2']}]},
 {client, [{certfile, "$PWD/$host.pem"},
           {keyfile, "$PWD/$host.key"},
           {cacertfile, "$PWD/ca.pem"},
           {verify, verify_peer},
           {secure_renegotiate, true},
           {versions, ['tlsv1.3', 'tlsv1.2']}]}].
CONF
  echo "$dir/$host.pem, $host.key, $host.ssl_dist.conf"
done
