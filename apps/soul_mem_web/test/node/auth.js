// Tokens: a wrong token cannot open the socket nor the API; a token of
// another character can neither join nor read/write this character.
"use strict";
const { env, fail, check, socket, reply, connected, request, deadline, WebSocket } = require("./lib");
const T = "auth";
deadline(T, 20000);

// The upgrade itself is refused: resolves the HTTP status of the refusal.
function refusedUpgrade(query) {
  return new Promise((resolve) => {
    const ws = new WebSocket(`${env.socketUrl}/websocket?vsn=2.0.0${query}`);
    ws.on("unexpected-response", (_req, res) => { resolve(res.statusCode); ws.terminate(); });
    ws.on("open", () => { resolve("opened"); ws.close(); });
    ws.on("error", () => {});
  });
}

async function main() {
  check(T, (await refusedUpgrade("&token=wrong-token")) === 403, "a wrong socket token was accepted");
  check(T, (await refusedUpgrade("")) === 403, "a socket without token was accepted");

  // The official client sees the refusal as a socket error.
  const bad = socket("wrong-token");
  const err = await connected(bad).then(() => "connected", (e) => e.message);
  bad.disconnect();
  check(T, err.startsWith("socket error"), "phoenix client with a wrong token: " + err);

  // The other character's token opens a socket, but not this character.
  const s = socket(env.otherToken);
  await connected(s);
  const mine = s.channel(`character:${env.otherCharacter}`, {});
  const ok = await reply(mine.join());
  check(T, ok.status === "ok", "join of its own character: " + JSON.stringify(ok));
  const theirs = s.channel(`character:${env.character}`, {});
  const refused = await reply(theirs.join());
  check(T, refused.status === "error" && refused.response.reason === "forbidden", "join with another character's token: " + JSON.stringify(refused));
  // Pushing on the refused topic does nothing but an error.
  const raw = s.channel(`character:${env.character}`, {});
  raw.state = "joined"; raw.joinedOnce = true; // push without a successful join
  const sneaky = await reply(raw.push("message", { role: "user", text: "我不是你" }));
  check(T, sneaky.status === "error" || sneaky.status === "timeout", "a push on an unjoined topic was served: " + JSON.stringify(sneaky));
  // A join payload token overrides the socket's.
  const withOwn = s.channel(`character:${env.character}`, { token: env.token });
  const own = await reply(withOwn.join());
  check(T, own.status === "ok", "join with the right token in the payload: " + JSON.stringify(own));
  const wrongPayload = s.channel(`character:${env.character}x`, { token: "nope" });
  const wp = await reply(wrongPayload.join());
  check(T, wp.status === "error" && wp.response.reason === "unauthorized", "join with a wrong payload token: " + JSON.stringify(wp));
  s.disconnect();

  // HTTP: no token 401, wrong token 401, other character's token 403, for reads and writes.
  const path = `/api/characters/${env.character}`;
  const cases = [
    ["POST", "/messages", { role: "user", text: "hi" }],
    ["POST", "/recall", { text: "麻辣烫" }],
    ["GET", "/notes/sem_self", undefined],
    ["PUT", "/notes/sem_self", { tags: [] }],
    ["GET", "/export", undefined]
  ];
  for (const [method, suffix, body] of cases) {
    const none = await request(method, path + suffix, null, body);
    check(T, none.status === 401 && none.body.error.code === "unauthorized", `${method} ${suffix} without token: ${none.status} ${none.text}`);
    const wrong = await request(method, path + suffix, "wrong-token", body);
    check(T, wrong.status === 401, `${method} ${suffix} with a wrong token: ${wrong.status}`);
    const other = await request(method, path + suffix, env.otherToken, body);
    check(T, other.status === 403 && other.body.error.code === "forbidden", `${method} ${suffix} with another character's token: ${other.status} ${other.text}`);
  }
  const good = await request("GET", `${path}/notes/sem_self`, env.token);
  check(T, good.status === 200 && good.body.note.id === "sem_self", "GET note with the right token: " + good.status);

  console.log(JSON.stringify({ test: T, ok: true }));
  process.exit(0);
}

main().catch((e) => fail(T, e.stack || String(e)));
