//! `soul_tune dataplane`: a Rust client of the MessagePack data plane (`SoulMemWeb.DataPlane`)
//! with `rmp-serde`. Runs every operation against a running server, times recall round trips
//! and a load run (`--clients` connections × `--requests` recalls each, counting every reply).
//! Starts nothing itself: `data_plane_test.exs` and `bench/dataplane.exs` start the server.

use serde::Serialize;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

struct Options {
    addr: String,
    token: String,
    character: String,
    clients: usize,
    requests: usize,
    rounds: usize,
    json: bool,
}

#[derive(Serialize)]
struct Request<'a> {
    op: &'a str,
    #[serde(rename = "ref")]
    reference: u64,
    character: &'a str,
    token: &'a str,
    args: Value,
}

struct Client {
    stream: TcpStream,
    next_ref: u64,
}

impl Client {
    fn connect(addr: &str) -> Result<Self, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        Ok(Client {
            stream,
            next_ref: 1,
        })
    }

    /// One request and its reply (pushes before it are skipped); the reply must carry the ref.
    fn call(&mut self, o: &Options, op: &str, args: Value, token: &str) -> Result<Value, String> {
        let reference = self.next_ref;
        self.next_ref += 1;
        let request = Request {
            op,
            reference,
            character: &o.character,
            token,
            args,
        };
        // to_vec_named: structs as maps (rmp-serde's default is arrays).
        let body = rmp_serde::to_vec_named(&request).map_err(|e| e.to_string())?;
        let len = u32::try_from(body.len()).map_err(|_| "request too large".to_string())?;
        let mut frame = len.to_be_bytes().to_vec();
        frame.extend(body);
        self.stream.write_all(&frame).map_err(|e| e.to_string())?;
        loop {
            let reply = self.read_frame()?;
            if reply.get("push").is_some() {
                continue;
            }
            if reply["ref"] != json!(reference) {
                return Err(format!("{op}: reply for another ref: {reply}"));
            }
            return Ok(reply);
        }
    }

    fn read_frame(&mut self) -> Result<Value, String> {
        let mut head = [0u8; 4];
        self.stream
            .read_exact(&mut head)
            .map_err(|e| format!("read: {e}"))?;
        let mut body = vec![0u8; u32::from_be_bytes(head) as usize];
        self.stream
            .read_exact(&mut body)
            .map_err(|e| format!("read: {e}"))?;
        rmp_serde::from_slice(&body).map_err(|e| format!("not MessagePack: {e}"))
    }
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        addr: "127.0.0.1:4040".into(),
        token: String::new(),
        character: "demo".into(),
        clients: 100,
        requests: 100,
        rounds: 500,
        json: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--addr" => o.addr = value()?,
            "--token" => o.token = value()?,
            "--character" => o.character = value()?,
            "--clients" => o.clients = number(value()?)?,
            "--requests" => o.requests = number(value()?)?,
            "--rounds" => o.rounds = number(value()?)?,
            "--json" => o.json = true,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if o.token.is_empty() {
        return Err("--token is required".into());
    }
    Ok(o)
}

pub fn run(args: &[String]) -> ExitCode {
    match parse(args).and_then(|o| run_with(&o)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soul_tune dataplane: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_with(o: &Options) -> Result<(), String> {
    let ops = every_op(o)?;
    let (median_us, p99_us) = recall_round_trips(o)?;
    let load = load_run(o)?;
    if o.json {
        println!(
            "{}",
            json!({"ops_ok": ops, "recall_us": {"median": median_us, "p99": p99_us}, "load": load})
        );
    } else {
        println!("operations ok: {}", ops.join(", "));
        println!(
            "recall round trip over {} rounds: median {median_us} µs, p99 {p99_us} µs",
            o.rounds
        );
        println!("load: {load}");
    }
    Ok(())
}

fn every_op(o: &Options) -> Result<Vec<&'static str>, String> {
    let mut c = Client::connect(&o.addr)?;
    let steps: Vec<(&'static str, Value)> = vec![
        ("message", json!({"role": "user", "text": "你还记得小白吗"})),
        ("recall", json!({"text": "小白"})),
        ("turn", json!({"text": "周末去画画吧", "reply": false})),
        ("history", json!({})),
        ("graph", json!({"ids": ["sem_xiaobai"]})),
        ("feedback", json!({"note_id": "sem_xiaobai", "value": 1})),
        ("control", json!({"task": "summarize_pending"})),
        ("notes", json!({"query": "小白"})),
        ("export", json!({"format": "world_info"})),
        ("subscribe", json!({})),
        ("unsubscribe", json!({})),
    ];
    let mut done = Vec::new();
    let mut ok = |c: &mut Client, op: &'static str, args: Value| -> Result<Value, String> {
        let reply = c.call(o, op, args, &o.token)?;
        if reply["ok"] != json!(true) {
            return Err(format!("{op} failed: {reply}"));
        }
        done.push(op);
        Ok(reply["result"].clone())
    };
    for (op, args) in steps {
        ok(&mut c, op, args)?;
    }
    // A new note shaped like an existing one, put and deleted again.
    let got = ok(&mut c, "note:get", json!({"id": "sem_xiaobai"}))?;
    let note = json!({"id": "sem_rust_client", "tags": [], "mem_links": [],
        "mem_type": got["note"]["mem_type"]});
    ok(&mut c, "note:put", json!({ "note": note }))?;
    ok(&mut c, "note:delete", json!({"id": "sem_rust_client"}))?;
    let reply = c.call(o, "recall", json!({"text": "x"}), "not-a-token")?;
    if reply["error"]["code"] != json!("unauthorized") {
        return Err(format!("a wrong token was not refused: {reply}"));
    }
    Ok(done)
}

fn recall_round_trips(o: &Options) -> Result<(u128, u128), String> {
    let mut c = Client::connect(&o.addr)?;
    let mut times = Vec::with_capacity(o.rounds);
    for i in 0..o.rounds.max(1) {
        let start = Instant::now();
        let reply = c.call(
            o,
            "recall",
            json!({"text": format!("小白 {}", i % 10)}),
            &o.token,
        )?;
        times.push(start.elapsed().as_micros());
        if reply["ok"] != json!(true) {
            return Err(format!("recall failed: {reply}"));
        }
    }
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Ok((at(0.5), at(0.99)))
}

/// Every client sends its recalls one after another on its own connection; a request counts
/// as answered when the reply with its ref arrived, as an error when that reply is not ok.
fn load_run(o: &Options) -> Result<Value, String> {
    let start = Instant::now();
    let handles: Vec<_> = (0..o.clients)
        .map(|n| {
            let (addr, token, character) = (o.addr.clone(), o.token.clone(), o.character.clone());
            let requests = o.requests;
            std::thread::spawn(move || -> Result<(usize, Vec<String>), String> {
                let opts = Options {
                    addr,
                    token,
                    character,
                    clients: 0,
                    requests,
                    rounds: 0,
                    json: false,
                };
                let mut c = Client::connect(&opts.addr)?;
                let (mut answered, mut errors) = (0, Vec::new());
                for i in 0..requests {
                    let text = json!({"text": format!("小白 {n} {i}")});
                    let reply = c.call(&opts, "recall", text, &opts.token)?;
                    answered += 1;
                    if reply["ok"] != json!(true) {
                        errors.push(reply["error"]["code"].as_str().unwrap_or("?").to_owned());
                    }
                }
                Ok((answered, errors))
            })
        })
        .collect();
    let (mut answered, mut lost_clients) = (0usize, 0usize);
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    for h in handles {
        match h.join() {
            Ok(Ok((a, e))) => {
                answered += a;
                for code in e {
                    *codes.entry(code).or_default() += 1;
                }
            }
            Ok(Err(e)) => {
                eprintln!("a client failed: {e}");
                lost_clients += 1;
            }
            Err(_) => lost_clients += 1,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let sent = o.clients * o.requests;
    Ok(json!({
        "clients": o.clients, "sent": sent, "answered": answered,
        "errors": codes.values().sum::<usize>(), "error_codes": codes,
        "failed_clients": lost_clients, "seconds": (secs * 1000.0).round() / 1000.0,
        "per_second": (answered as f64 / secs).round()
    }))
}
