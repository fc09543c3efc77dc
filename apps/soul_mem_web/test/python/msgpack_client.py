"""The MessagePack data plane from Python (PyPI msgpack), run by data_plane_test.exs.

Env: SOUL_DATA_ADDR host:port, SOUL_TOKEN / SOUL_CHARACTER (a token that opens the
character), SOUL_OTHER_TOKEN (another character's), SOUL_MAX_FRAME. Runs every operation,
then bad input, checking after each bad connection that a fresh one is still served. Prints
one JSON line: {"ok": true, "ops": [...]}; any failed check raises (exit status 1).
"""

import json
import os
import socket
import struct

import msgpack

HOST, PORT = os.environ["SOUL_DATA_ADDR"].rsplit(":", 1)
TOKEN = os.environ["SOUL_TOKEN"]
CHARACTER = os.environ["SOUL_CHARACTER"]
OTHER_TOKEN = os.environ["SOUL_OTHER_TOKEN"]
MAX_FRAME = int(os.environ["SOUL_MAX_FRAME"])


def connect():
    return socket.create_connection((HOST, int(PORT)), timeout=10)


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_frame(sock):
    head = read_exact(sock, 4)
    if head is None:
        return None
    (length,) = struct.unpack(">I", head)
    return msgpack.unpackb(read_exact(sock, length), raw=False)


def send_frame(sock, body):
    data = msgpack.packb(body, use_bin_type=True)
    sock.sendall(struct.pack(">I", len(data)) + data)


def call(sock, op, args=None, ref=1, token=TOKEN):
    send_frame(sock, {"op": op, "ref": ref, "character": CHARACTER, "token": token, "args": args or {}})
    reply = read_frame(sock)
    assert reply["ref"] == ref, reply
    return reply


def ok(sock, op, args=None):
    reply = call(sock, op, args)
    assert reply["ok"] is True, (op, reply)
    return reply["result"]


def served():
    with connect() as s:
        assert call(s, "history")["ok"] is True


def main():
    ops = []
    with connect() as s:
        assert ok(s, "message", {"role": "user", "text": "你还记得小白吗"}) == {"ok": True}
        recall = ok(s, "recall", {"text": "小白"})
        assert isinstance(recall["context"], str) and recall["memories"]
        assert isinstance(ok(s, "turn", {"text": "周末去画画吧", "reply": False})["memories"], list)
        assert [m["text"] for m in ok(s, "history")["messages"]][-1] == "周末去画画吧"
        assert ok(s, "graph", {"ids": ["sem_xiaobai"]})["nodes"]
        assert ok(s, "feedback", {"note_id": "sem_xiaobai", "value": -1}) == {"ok": True}
        assert ok(s, "control", {"task": "summarize_pending"})["started"] is True
        assert ok(s, "notes", {"query": "小白"})["total"] > 0
        note = ok(s, "note:get", {"id": "sem_xiaobai"})["note"]
        new = {"id": "sem_py", "tags": [], "mem_type": note["mem_type"], "mem_links": []}
        assert ok(s, "note:put", {"note": new})["note"]["id"] == "sem_py"
        assert ok(s, "note:delete", {"id": "sem_py"})["id"] == "sem_py"
        assert "entries" in ok(s, "export", {"format": "world_info"})
        assert call(s, "import", {"document": []})["error"]["code"] == "invalid_payload"
        assert ok(s, "subscribe") == {"subscribed": True}
        assert ok(s, "unsubscribe") == {"subscribed": False}
        ops = ["message", "recall", "turn", "history", "graph", "feedback", "control", "notes",
               "note:get", "note:put", "note:delete", "export", "import", "subscribe", "unsubscribe"]

        # a string ref comes back as is
        assert call(s, "recall", {"text": "x"}, ref="r-1")["ref"] == "r-1"
        # wrong token, another character's token
        assert call(s, "recall", {"text": "x"}, token="nope")["error"]["code"] == "unauthorized"
        assert call(s, "recall", {"text": "x"}, token=OTHER_TOKEN)["error"]["code"] == "forbidden"
        # decodes, but is not a request: answered, connection kept
        send_frame(s, [1, 2, 3])
        assert read_frame(s)["error"]["code"] == "invalid_frame"
        send_frame(s, {"op": "recall", "ref": 5})
        reply = read_frame(s)
        assert reply["ref"] == 5 and reply["error"]["code"] == "invalid_frame", reply
        assert call(s, "history")["ok"] is True

    # garbage bytes: an error frame, then the connection is closed
    with connect() as s:
        s.sendall(struct.pack(">I", 3) + b"\xc1\xff\x00")
        assert read_frame(s)["error"]["code"] == "invalid_frame"
        assert read_frame(s) is None
    served()

    # an oversize length prefix: too_large, then closed
    with connect() as s:
        s.sendall(struct.pack(">I", MAX_FRAME + 1) + b"\x00" * 16)
        assert read_frame(s)["error"]["code"] == "too_large"
        assert read_frame(s) is None
    served()

    # a truncated frame: the client goes away mid-frame
    with connect() as s:
        data = msgpack.packb({"op": "history", "ref": 1, "character": CHARACTER, "token": TOKEN})
        s.sendall(struct.pack(">I", len(data)) + data[:4])
    served()

    print(json.dumps({"ok": True, "ops": ops}))


if __name__ == "__main__":
    main()
