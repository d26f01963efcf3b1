#!/usr/bin/env bash
# A read-only check of the event bus broker tunnel on a live fleet, for a
# router that runs outside the cluster with dynamo.load.transport: broker
# and brokers deployed in the workers' namespace. Three checks, in order:
#
#   1. bus connection: every subscription of GET /admin/dynamo/workers is
#      connected through a broker (transport broker, a broker id), every
#      configured namespace is covered; the router's
#      continuum_dynamo_event_bus_sessions, and each broker pod's own
#      metrics (session up, streams, advertised publishers) read through the
#      API server's pod proxy.
#   2. load freshness: for --window seconds, once a second, the router's
#      /admin/dynamo/load and /metrics: kv_metrics and kv-events frames
#      decoded, the longest a worker rank with load went without a sample
#      (against --max-staleness-ms), and, by role, the share of selections
#      made on fresh load (reason="load" or "kv_aware") against round robin
#      (reason="round_robin_stale"; a decode share under --min-fresh-share
#      fails when the polls also saw stale load or a gap over the bound).
#   3. relay latency (only with --probe-image): a one-off non-root pod in the
#      broker namespace times TCP and TLS handshakes with the bus address;
#      half the median TCP+TLS handshake is reported as the one-way
#      estimate (an upper bound: it is about a round trip), with half the
#      TCP handshake's round trip beside it.
#
# Nothing is created in the cluster without --probe-image; the router is
# only read (its admin API logs each call). Exit status: 0 when every check
# passed, 1 when one failed, 2 on a usage error, a missing tool, or a router
# or broker pod list that cannot be read.
#
#   ROUTER_ADMIN_TOKEN=... scripts/dynamo-broker-live-check.sh \
#       --context CONTEXT --namespace BROKER_NAMESPACE \
#       --router-url https://ROUTER_HOST:PORT \
#       --window 300 --max-staleness-ms 3000 \
#       --probe-image curlimages/curl:8.11.1 --bus-url https://BUS_HOST:PORT
#
# Needs bash 4.4 or later, curl and jq; kubectl for the broker pods and the
# probe.
set -euo pipefail
if ((BASH_VERSINFO[0] < 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] < 4))); then
  echo "dynamo-broker-live-check: needs bash 4.4 or later (this is $BASH_VERSION)" >&2
  exit 2
fi
# Numbers are read and printed with a point, whatever the user's locale.
export LC_ALL=C

usage() {
  cat <<'EOF'
usage: ROUTER_ADMIN_TOKEN=... dynamo-broker-live-check.sh --router-url URL [options]

  --router-url URL          the router's admin API (admin.bind_address, or the main
                            listener when the admin API has none); /metrics is read there too
  --context NAME            kubectl context of the cluster the brokers run in
  --namespace NS            the brokers' Kubernetes namespace (broker pods and the probe)
  --selector LABELS         the broker pods' label selector
                            (default app.kubernetes.io/name=continuum-broker)
  --broker-metrics-url URL  a broker's metrics address read directly (repeatable), for
                            brokers reached by a port-forward or run outside Kubernetes
  --window SECONDS          how long check 2 watches (default 300)
  --max-staleness-ms MS     the longest a loaded worker rank may go without a sample
                            (default 3000, the router's dynamo.load.max_staleness default)
  --min-fresh-share F       the least share of decode selections made on fresh load
                            (default 0.99)
  --probe-image IMAGE       run check 3 from a one-off pod of IMAGE (it needs sh, seq and
                            a curl with HTTP/2)
  --bus-url URL             the router's event bus address as the brokers dial it (check 3)
  --probes N                handshakes check 3 times (default 20)
  --probe-timeout SECONDS   how long the probe pod may take to start (default 120)
  --cacert FILE             CA bundle for an https router URL
  --kubectl PATH            the kubectl to run (default: kubectl on PATH)
EOF
}

die() {
  echo "dynamo-broker-live-check: $*" >&2
  exit 2
}

router_url="" context="" namespace="" selector="app.kubernetes.io/name=continuum-broker"
window=300 max_staleness_ms=3000 min_fresh_share=0.99 probe_image="" bus_url="" probes=20 probe_timeout=120
cacert="" kubectl_bin="kubectl"
broker_urls=()
while (($#)); do
  flag=$1 value="" inline=0
  case "$flag" in
  -h | --help)
    usage
    exit 0
    ;;
  --*=*) flag=${1%%=*} value=${1#*=} inline=1 ;;
  --*) ;;
  *) die "unexpected argument $1 (see --help)" ;;
  esac
  if ((!inline)); then
    (($# >= 2)) || die "$flag needs a value"
    value=$2
    shift
  fi
  shift
  case "$flag" in
  --router-url) router_url=${value%/} ;;
  --context) context=$value ;;
  --namespace) namespace=$value ;;
  --selector) selector=$value ;;
  --broker-metrics-url)
    value=${value%/}
    broker_urls+=("${value%/metrics}")
    ;;
  --window) window=$value ;;
  --max-staleness-ms) max_staleness_ms=$value ;;
  --min-fresh-share) min_fresh_share=$value ;;
  --probe-image) probe_image=$value ;;
  --bus-url) bus_url=$value ;;
  --probes) probes=$value ;;
  --probe-timeout) probe_timeout=$value ;;
  --cacert) cacert=$value ;;
  --kubectl) kubectl_bin=$value ;;
  *) die "unknown flag $flag (see --help)" ;;
  esac
done

[[ -n "$router_url" ]] || die "--router-url is required"
[[ -n "${ROUTER_ADMIN_TOKEN:-}" ]] || die "ROUTER_ADMIN_TOKEN is not set (the router's admin.token)"
[[ "$window" =~ ^[0-9]+$ ]] || die "--window must be a whole number of seconds, not $window"
[[ "$max_staleness_ms" =~ ^[0-9]+$ && "$max_staleness_ms" -gt 0 ]] || die "--max-staleness-ms must be a positive number of milliseconds, not $max_staleness_ms"
[[ "$probes" =~ ^[0-9]+$ && "$probes" -gt 0 ]] || die "--probes must be a positive number, not $probes"
[[ "$probe_timeout" =~ ^[0-9]+$ && "$probe_timeout" -gt 0 ]] || die "--probe-timeout must be a positive number of seconds, not $probe_timeout"
# Leading zeros are decimal here, not octal.
window=$((10#$window)) max_staleness_ms=$((10#$max_staleness_ms)) probes=$((10#$probes)) probe_timeout=$((10#$probe_timeout))
awk -v f="$min_fresh_share" 'BEGIN { exit !(f ~ /^(0|1)?(\.[0-9]+)?$/ && f != "" && f != "." && f + 0 <= 1) }' ||
  die "--min-fresh-share must be a number from 0 to 1, not $min_fresh_share"
if [[ -n "$probe_image" ]]; then
  [[ -n "$bus_url" ]] || die "--probe-image needs --bus-url"
  [[ -n "$namespace" ]] || die "--probe-image needs --namespace (where the probe pod runs)"
  [[ "$bus_url" =~ ^https://[^/\'\"\ ]+/?$ ]] || die "--bus-url must be https://HOST:PORT, not $bus_url"
fi
for tool in curl jq awk; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
use_kube=0
if [[ -n "$namespace" ]]; then
  command -v "$kubectl_bin" >/dev/null || die "$kubectl_bin is required with --namespace"
  use_kube=1
fi

kube() {
  if [[ -n "$context" ]]; then
    "$kubectl_bin" --context "$context" "$@"
  else
    "$kubectl_bin" "$@"
  fi
}

curl_opts=(--silent --show-error --fail --max-time 10)
[[ -n "$cacert" ]] && curl_opts+=(--cacert "$cacert")

# router_get PATH: the router's answer to an admin-authenticated GET.
router_get() {
  curl "${curl_opts[@]}" -H "Authorization: Bearer $ROUTER_ADMIN_TOKEN" "$router_url$1"
}

# metric_sum NAME [LABEL="VALUE"...] < exposition: the sum of NAME's samples
# that carry every given label pair (0 when none does).
metric_sum() {
  local name=$1
  shift
  awk -v name="$name" -v want="$*" '
    BEGIN { n = split(want, labels, " ") }
    $0 !~ /^#/ {
      series = $1
      base = series
      sub(/\{.*/, "", base)
      if (base != name) next
      for (i = 1; i <= n; i++) if (index(series, labels[i]) == 0) next
      # NaN and infinities (a gauge may be either) add nothing.
      if ($NF ~ /^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/) sum += $NF
    }
    END { printf "%.0f\n", sum }'
}

failed=0
pass() { echo "  PASS  $*"; }
fail() {
  echo "  FAIL  $*"
  failed=1
}
warn() { echo "  WARN  $*"; }
info() { echo "        $*"; }

# broker_report NAME METRICS: a broker's own view, failing when its session
# with the router's bus is down.
broker_report() {
  local name=$1 metrics=$2 up streams advertised opened refused
  up=$(metric_sum continuum_broker_session_connected <<<"$metrics")
  streams=$(metric_sum continuum_broker_streams <<<"$metrics")
  advertised=$(metric_sum continuum_broker_advertised_publishers <<<"$metrics")
  opened=$(metric_sum continuum_broker_streams_total 'result="opened"' <<<"$metrics")
  refused=$(($(metric_sum continuum_broker_streams_total <<<"$metrics") - opened))
  if [[ "$up" == 1 ]]; then
    pass "broker $name: session up, $streams streams relayed, $advertised publishers advertised ($opened streams opened, $refused refused or ended)"
  else
    fail "broker $name: its session with the router's event bus is down (continuum_broker_session_connected $up)"
  fi
}

echo "== 1. bus connection"
workers=$(router_get /admin/dynamo/workers) || die "GET $router_url/admin/dynamo/workers failed (URL, admin token, CA?)"
jq -e 'type == "object" and has("subscriptions")' <<<"$workers" >/dev/null 2>&1 ||
  die "$router_url/admin/dynamo/workers did not answer with the router's workers view"
if [[ $(jq -r '.enabled' <<<"$workers") != true ]]; then
  fail "Dynamo discovery is not enabled on the router"
elif [[ $(jq -r 'has("broker_coverage")' <<<"$workers") != true ]]; then
  fail "the router does not run dynamo.load.transport: broker"
else
  total=$(jq '.subscriptions | length' <<<"$workers")
  bad=$(jq -r '.subscriptions[] | select(.transport != "broker" or .state != "connected" or (.broker // "") == "")
    | "\(.family) publisher \(.publisher_id) (\(.namespace)/\(.component)): \(.state), transport \(.transport)\(if .broker then ", broker " + .broker else "" end)"' <<<"$workers")
  if ((total == 0)); then
    fail "no subscriptions: the router has discovered no kv_metrics or kv-events publisher"
  elif [[ -n "$bad" ]]; then
    fail "$(wc -l <<<"$bad") of $total subscriptions are not connected through a broker:"
    while IFS= read -r line; do info "$line"; done <<<"$bad"
  else
    pass "all $total subscriptions connected through a broker: $(jq -r '[.subscriptions[].broker] | group_by(.) | map("\(.[0]) \(length)") | join(", ")' <<<"$workers")"
  fi
  uncovered=$(jq -r '.broker_coverage[] | select(.covered | not) | "\(.namespace) (\(.pending_subscriptions) subscriptions pending)"' <<<"$workers")
  if [[ -n "$uncovered" ]]; then
    fail "namespaces no broker covers: $(paste -sd, - <<<"$uncovered" | sed 's/,/, /g')"
  else
    pass "namespaces covered: $(jq -r '[.broker_coverage[] | "\(.namespace) by \(.brokers | join("+"))"] | join(", ")' <<<"$workers")"
  fi
fi
metrics=$(router_get /metrics) || die "GET $router_url/metrics failed"
info "router: continuum_dynamo_event_bus_sessions $(metric_sum continuum_dynamo_event_bus_sessions <<<"$metrics")"

if ((use_kube)); then
  # Pods that have finished (an evicted one of a Deployment stays listed
  # as Failed) are not brokers any more.
  pods=$(kube -n "$namespace" get pods -l "$selector" --field-selector=status.phase!=Succeeded,status.phase!=Failed --request-timeout=20s \
    -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.phase}{" "}{.metadata.deletionTimestamp}{"|"}{.spec.containers[*].ports[?(@.name=="metrics")].containerPort}{"\n"}{end}') ||
    die "kubectl could not list the pods of $selector in $namespace"
  if [[ -z "$pods" ]]; then
    fail "no broker pods match $selector in namespace $namespace"
  fi
  while read -r pod phase rest; do
    [[ -n "$pod" ]] || continue
    deleting=${rest%%|*} port=${rest#*|}
    if [[ -n "$deleting" ]]; then
      warn "broker pod $pod is terminating (since $deleting): not checked"
      continue
    fi
    if [[ "$phase" != Running ]]; then
      fail "broker pod $pod is $phase"
      continue
    fi
    if [[ -z "$port" ]]; then
      warn "broker pod $pod has no container port named metrics: its metrics not read"
      continue
    fi
    if ! bm=$(kube get --raw "/api/v1/namespaces/$namespace/pods/$pod:${port%% *}/proxy/metrics" --request-timeout=10s 2>&1); then
      warn "broker pod $pod: metrics not readable through the API server (pods/proxy): ${bm//$'\n'/ }"
      continue
    fi
    broker_report "pod $pod" "$bm"
  done <<<"$pods"
fi
for url in "${broker_urls[@]}"; do
  if ! bm=$(curl --silent --show-error --fail --max-time 10 "$url/metrics" 2>&1); then
    fail "broker at $url: metrics not readable: $bm"
    continue
  fi
  broker_report "at $url" "$bm"
done
if ((!use_kube)) && ((${#broker_urls[@]} == 0)); then
  info "brokers' own metrics not read (give --namespace, or --broker-metrics-url)"
fi

echo "== 2. load freshness ($window s)"
# Per rank: the largest age its sample had, at a poll, while it carried
# load (one of its three figures above zero). A rank whose last sample is
# all zero is idle, with nothing to publish, and is no gap however old its
# sample (the router calls it quiet). Polls come about a second apart, so
# a gap reads up to that much short.
declare -A worst=()
stale_polls=0
first=$metrics
last=$metrics
polls=0
router_max="?"
deadline=$((SECONDS + window))
while :; do
  if view=$(router_get /admin/dynamo/load 2>/dev/null) &&
    rows=$(jq -r '.max_staleness_ms as $max | "max \($max)", (.samples[]
      | select((.active_decode_blocks // 0) > 0 or (.active_prefill_tokens // 0) > 0 or (.kv_used_blocks // 0) > 0)
      | "\(.worker_id)/\(.dp_rank) \(.age_ms) \(.state)")' <<<"$view" 2>/dev/null); then
    polls=$((polls + 1))
    while read -r rank age state; do
      [[ -n "$rank" ]] || continue
      if [[ "$rank" == max ]]; then
        router_max=$age
        continue
      fi
      if [[ "$state" == stale ]]; then stale_polls=$((stale_polls + 1)); fi
      if [[ -z "${worst[$rank]:-}" || "$age" -gt "${worst[$rank]}" ]]; then worst[$rank]=$age; fi
    done <<<"$rows"
  else
    warn "a poll of /admin/dynamo/load failed"
  fi
  if m=$(router_get /metrics 2>/dev/null); then last=$m; fi
  ((SECONDS < deadline)) || break
  sleep 1
done
delta() { echo $(($(metric_sum "$@" <<<"$last") - $(metric_sum "$@" <<<"$first"))); }
load_frames=$(delta continuum_dynamo_load_events_total 'result="accepted"')
load_dropped=$(($(delta continuum_dynamo_load_events_total) - load_frames))
kv_frames=$(delta continuum_dynamo_kv_events_total 'result="accepted"')
kv_dropped=$(($(delta continuum_dynamo_kv_events_total) - kv_frames))
info "frames decoded: kv_metrics $load_frames accepted ($load_dropped dropped), kv-events $kv_frames accepted ($kv_dropped not indexed)"
info "${#worst[@]} ranks carried load over $polls polls; the router's max_staleness $router_max ms"
routed=$(delta continuum_dynamo_selection_total)
# Workers publish kv_metrics as they work: an idle fleet sends none.
if ((load_frames == 0 && routed > 0)); then
  fail "no kv_metrics sample arrived in the window, under traffic"
elif ((load_frames == 0)); then
  warn "no kv_metrics sample arrived in the window, and no request was routed: an idle fleet publishes none"
fi
gap=0 gap_rank=""
for rank in "${!worst[@]}"; do
  if ((${worst[$rank]} > gap)); then gap=${worst[$rank]} gap_rank=$rank; fi
done
if ((${#worst[@]} == 0)); then
  warn "no rank carried load during the window: freshness not measured"
elif ((gap > max_staleness_ms)); then
  fail "longest gap ${gap} ms (rank $gap_rank) is over ${max_staleness_ms} ms; $stale_polls rank polls found stale load"
else
  pass "longest gap ${gap} ms (rank $gap_rank) within ${max_staleness_ms} ms"
fi
# Selections by role: on fresh load (reason "load", or "kv_aware" with
# KV-aware routing) or round robin. A decode pick is round robin when no
# candidate has a fresh sample: stale load, or workers idle between
# requests whose last sample is older than max_staleness (they publish
# only as their load changes). So a low decode share fails only beside
# stale load or a gap seen by the polls, and is a warning otherwise. A
# prefill pool whose workers send no active_prefill_tokens (Dynamo 1.4.2's
# vLLM workers) is taken in turn on fresh load too: its share is reported.
for role in decode prefill; do
  fresh=$(($(delta continuum_dynamo_selection_total "role=\"$role\"" 'reason="load"') +
    $(delta continuum_dynamo_selection_total "role=\"$role\"" 'reason="kv_aware"')))
  stale=$(delta continuum_dynamo_selection_total "role=\"$role\"" 'reason="round_robin_stale"')
  line="$role selections on fresh load: $fresh of $((fresh + stale)) (round_robin_stale $stale)"
  if ((fresh + stale == 0)); then
    warn "no $role selections during the window: the fresh share not measured"
  elif [[ "$role" == prefill ]]; then
    info "$line"
  elif awk -v f="$fresh" -v s="$stale" -v min="$min_fresh_share" 'BEGIN { exit !(f / (f + s) >= min) }'; then
    pass "$line"
  elif ((stale_polls > 0 || gap > max_staleness_ms)); then
    fail "$line, under $min_fresh_share"
  else
    warn "$line, under $min_fresh_share, with no stale load seen: workers idle between requests (steady traffic measures it)"
  fi
done

if [[ -n "$probe_image" ]]; then
  echo "== 3. relay latency (from $namespace to $bus_url, $probes handshakes)"
  pod="continuum-live-check-$(date +%s)-$RANDOM"
  errs=$(mktemp)
  trap 'kube -n "$namespace" delete pod "$pod" --ignore-not-found --wait=false --request-timeout=20s >/dev/null 2>&1 || true; rm -f "$errs"' EXIT
  # Only handshakes are timed: no credential is sent, and the bus answers
  # the bare request with a refusal that is not read.
  script="for i in \$(seq $probes); do curl -sk --http2 -o /dev/null --max-time 5 -w 'probe %{time_namelookup} %{time_connect} %{time_appconnect}\\n' '${bus_url%/}/' || true; done"
  overrides=$(jq -cn --arg name "$pod" --arg image "$probe_image" --arg script "$script" '{spec: {
    securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: "RuntimeDefault"}},
    containers: [{name: $name, image: $image, command: ["sh", "-c", $script],
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: ["ALL"]}}}]}}')
  if out=$(kube -n "$namespace" run "$pod" --image "$probe_image" --restart=Never --quiet --attach --rm \
    --pod-running-timeout="${probe_timeout}s" --overrides "$overrides" 2>"$errs"); then
    # Lines of the probe's own format only (kubectl may add warnings), of
    # handshakes that completed: TCP (connect less name lookup) and TCP+TLS
    # (TLS done less name lookup), in ms.
    times=$(awk '$1 == "probe" && NF == 4 && $2 ~ /^[0-9.]+$/ && $3 ~ /^[0-9.]+$/ && $4 ~ /^[0-9.]+$/ && $4 + 0 > 0 {
      printf "%.3f %.3f\n", ($3 - $2) * 1000, ($4 - $2) * 1000 }' <<<"$out")
    n=$(grep -c . <<<"$times" || true)
    if ((n == 0)); then
      fail "no handshake with $bus_url completed from the probe pod: $(tr '\n' ' ' <<<"$out" | cut -c1-300)"
    else
      median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
      tcp=$(awk '{ print $1 }' <<<"$times" | median)
      tls=$(awk '{ print $2 }' <<<"$times" | median)
      pass "$(awk -v n="$n" -v p="$probes" -v tcp="$tcp" -v tls="$tls" 'BEGIN {
        printf "%d of %d handshakes: median TCP %.2f ms, TCP+TLS %.2f ms; one-way estimate (half of TCP+TLS) %.2f ms, half the TCP round trip %.2f ms", n, p, tcp, tls, tls / 2, tcp / 2 }')"
    fi
  else
    fail "the probe pod did not run: $(tr '\n' ' ' <"$errs" | cut -c1-300)"
  fi
fi

if ((failed)); then
  echo "== result: FAILED"
  exit 1
fi
echo "== result: passed"
