#!/usr/bin/env bash
# greta-vk serve driven by curl, as the README's examples do: chat (plain and streamed with -N), completions, models,
# and the API key (401 without it or with a wrong one; /health open). Registered in CTest (label "server").
#   tests/server/curl_test.sh GRETA_VK MODEL
# Prints "PASS" and exits 0; "FAIL: ..." with the server's log and exits 1; exits 77 (CTest: skipped) without curl.
set -uo pipefail
bin=$1 model=$2
command -v curl >/dev/null || { echo "SKIP: curl is not installed"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/greta-curl.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- server log:"; tail -n 30 "$work/server.log"
  exit 1
}

"$bin" serve "$model" --port 0 --backend cpu --api-key test-key-123 2>"$work/server.log" &
pid=$!
port=
for _ in $(seq 1 600); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/server.log" | head -n 1)
  [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
  kill -0 "$pid" 2>/dev/null || fail "the server exited before it was ready"
  sleep 0.1
done
[ -n "$port" ] || fail "no port in the server's log"
url=http://127.0.0.1:$port
auth=(-H "Authorization: Bearer test-key-123")
json=(-H "Content-Type: application/json")

# /health needs no key
[ "$(curl -s "$url/health")" = '{"status":"ok"}' ] || fail "/health: $(curl -s "$url/health")"

# models
out=$(curl -sS "${auth[@]}" "$url/v1/models") || fail "/v1/models: curl failed"
grep -q '"id":"stories260K"' <<<"$out" || fail "/v1/models: $out"

# chat, not streamed
out=$(curl -sS "${auth[@]}" "${json[@]}" "$url/v1/chat/completions" \
  -d '{"model":"stories260K","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":12,"temperature":0}')
grep -q '"object":"chat.completion"' <<<"$out" || fail "chat: $out"
grep -q '"role":"assistant"' <<<"$out" || fail "chat message: $out"
grep -q '"completion_tokens":[0-9]' <<<"$out" || fail "chat usage: $out"

# chat, streamed (-N: no buffering): data lines, a role chunk, a finish_reason, then [DONE]
out=$(curl -sS -N "${auth[@]}" "${json[@]}" "$url/v1/chat/completions" \
  -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":8,"temperature":0,"stream":true}')
[ "$(grep -c '^data: ' <<<"$out")" -ge 3 ] || fail "chat stream: $out"
grep -q '"delta":{"content":"","role":"assistant"}' <<<"$out" || fail "chat stream role chunk: $out"
grep -q '"finish_reason":"length"' <<<"$out" || fail "chat stream finish_reason: $out"
[ "$(grep '^data: ' <<<"$out" | tail -n 1)" = "data: [DONE]" ] || fail "chat stream does not end with [DONE]: $out"

# completions: the greedy continuation of the README's prompt
out=$(curl -sS "${auth[@]}" "${json[@]}" "$url/v1/completions" \
  -d '{"prompt":"Once upon a time","max_tokens":10,"temperature":0}')
grep -q '"text":", there was a little girl named Lily"' <<<"$out" || fail "completions: $out"
grep -q '"prompt_tokens":5' <<<"$out" || fail "completions usage: $out"

# the API key: missing or wrong -> 401 with OpenAI's error object
for a in "" "Authorization: Bearer wrong"; do
  code=$(curl -s -o "$work/body" -w '%{http_code}' ${a:+-H "$a"} "${json[@]}" "$url/v1/completions" \
    -d '{"prompt":"Hi","max_tokens":2}')
  [ "$code" = 401 ] || fail "key '${a:-none}': status $code"
  grep -q '"code":"invalid_api_key"' "$work/body" || fail "key '${a:-none}': $(cat "$work/body")"
  grep -q '"type":"authentication_error"' "$work/body" || fail "key '${a:-none}': $(cat "$work/body")"
done

kill -TERM "$pid"
wait "$pid"
status=$?
pid=
[ "$status" = 0 ] || fail "the server exited with $status after SIGTERM"
echo PASS
