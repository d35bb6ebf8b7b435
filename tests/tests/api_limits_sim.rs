//! The limits on what a client may send or hold, on both routers of a hosted API on the simulated
//! cloud (the real binary; a one-worker cluster and a running job):
//!
//! - request bodies: past 64 KiB on any route of the API (`413 BODY_TOO_LARGE`, whether the
//!   `Content-Length` says so or the chunks do, on a route that reads its body or not), past
//!   1 GiB on the binary upload; past 3 MiB on the simulated Kubernetes' routes (`413`
//!   `RequestEntityTooLarge`, the apiserver's words), while a body of exactly 3 MiB is read. Without
//!   the token, every one of them is 401 first;
//! - exec messages: the API's WebSocket takes a 60 KiB stdin message and ends the session on a
//!   message past 64 KiB (the command never sees it); the simulated Kubernetes' exec takes
//!   512 KiB and ends on one past 1 MiB;
//! - streams: with 100 followed logs open, the next follow and an exec are refused with
//!   `429 TOO_MANY_STREAMS` and `Retry-After`; when one follow ends, a follow is served again.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anycloud_tests::e2e::{self, Api};
use anycloud_workflows::wire::exec_channel;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// The simulated apiserver's body limit.
const KUBE_BODY: usize = anycloud_sim::kube::body_limit::MAX_BODY_BYTES;

/// A hosted API with a ready one-worker cluster `demo` and a job `long` that runs for minutes.
fn api_with_job(id: &str) -> Api {
    let api = Api::start_hosted(id).with_demo_cluster(&[]);
    let script = "i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo line $i; sleep 1; done";
    api.cli(&["job", "python:3.12", "--cluster", "demo", "-i", "long", "--", "sh", "-c", script]).expect_code(0);
    e2e::wait_until(Duration::from_secs(90), "the job to run", || {
        (api.cli(&["--json", "status", "long"]).json()["state"] == "running").then_some(())
    });
    api
}

/// The cluster's control plane VM and token, from its kubeconfig.
fn cluster_access(api: &Api) -> (String, String) {
    let kubeconfig =
        get(api, &api.token(), "/v1/clusters/demo/kubeconfig").json()["kubeconfig"].as_str().unwrap().to_owned();
    let value = |key: &str| {
        kubeconfig.lines().find_map(|line| line.trim().strip_prefix(key).map(|value| value.trim().to_owned())).unwrap()
    };
    let vm = value("tls-server-name:").strip_suffix(anycloud_sim::kube::tls::NAME_SUFFIX).unwrap().to_owned();
    (vm, value("token:"))
}

fn get(api: &Api, token: &str, path: &str) -> e2e::HttpResponse {
    e2e::http(&api.url, "GET", path, &[("Authorization", &format!("Bearer {token}"))], b"")
}

/// A body sent in 16 KiB chunks (`Transfer-Encoding: chunked`), no length said.
fn chunked(size: usize) -> Vec<u8> {
    let mut body = Vec::new();
    let mut left = size;
    while left > 0 {
        let chunk = left.min(16 * 1024);
        body.extend_from_slice(format!("{chunk:x}\r\n").as_bytes());
        body.extend(std::iter::repeat_n(b'x', chunk));
        body.extend_from_slice(b"\r\n");
        left -= chunk;
    }
    body.extend_from_slice(b"0\r\n\r\n");
    body
}

/// Sends a request head that says a body of `length` follows, sends none, and reads the answer.
fn declared(api: &Api, method: &str, path: &str, token: &str, length: u64) -> (u16, String) {
    let authority = api.url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(authority).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\nContent-Type: \
         application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split_whitespace().nth(1).and_then(|status| status.parse().ok()).unwrap_or(0);
    (status, answer)
}

fn error_code(answer: &e2e::HttpResponse) -> String {
    answer.json()["error"]["code"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn bodies_exec_messages_and_streams_are_bounded_on_both_routers() {
    let api = api_with_job("limits");
    let token = api.token();
    let (vm, kube_token) = cluster_access(&api);
    let auth = format!("Bearer {token}");
    let json_headers = [("Authorization", auth.as_str()), ("Content-Type", "application/json")];

    // The API: 64 KiB on every route, said or streamed; 401 first without the token.
    let over = json!({ "name": "x".repeat(64 * 1024), "provider": "sim" }).to_string();
    for (method, path) in
        [("POST", "/v1/credentials"), ("POST", "/v1/jobs"), ("GET", "/v1/status"), ("GET", "/v1/health")]
    {
        let answer = e2e::http(&api.url, method, path, &json_headers, over.as_bytes());
        assert_eq!(
            (answer.status, error_code(&answer).as_str()),
            (413, "BODY_TOO_LARGE"),
            "{method} {path}: {answer:?}"
        );
        assert!(answer.json()["error"]["message"].as_str().unwrap().contains("64 KiB"), "{answer:?}");
    }
    let streamed =
        [("Authorization", auth.as_str()), ("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")];
    for (method, path) in [("POST", "/v1/clusters"), ("POST", "/v1/deployments/long/upgrade"), ("DELETE", "/v1/apis/x")]
    {
        let answer = e2e::http(&api.url, method, path, &streamed, &chunked(100 * 1024));
        assert!(answer.status == 413 && error_code(&answer) == "BODY_TOO_LARGE", "{method} {path} chunked: {answer:?}");
    }
    let unauthorized =
        e2e::http(&api.url, "POST", "/v1/credentials", &[("Content-Type", "application/json")], over.as_bytes());
    assert_eq!(unauthorized.status, 401, "{unauthorized:?}");
    let (status, answer) = declared(&api, "PUT", &format!("/v1/binaries/{}", "0".repeat(64)), &token, 2 << 30);
    assert!(status == 413 && answer.contains("BODY_TOO_LARGE") && answer.contains("1024 MiB"), "{answer}");
    let (status, _) = declared(&api, "PUT", &format!("/v1/binaries/{}", "0".repeat(64)), "wrong", 2 << 30);
    assert_eq!(status, 401);

    // The simulated Kubernetes: 3 MiB, in the apiserver's words; exactly 3 MiB is read.
    let kube_auth = format!("Bearer {kube_token}");
    let kube_headers = [("Authorization", kube_auth.as_str()), ("Content-Type", "application/json")];
    let pods = format!("/sim/kube/{vm}/api/v1/namespaces/anycloud/pods");
    let padded = |size: usize| {
        let object = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "big" }, "x": "" }).to_string();
        let pad = size - object.len();
        object.replace("\"x\":\"\"", &format!("\"x\":\"{}\"", "x".repeat(pad))).into_bytes()
    };
    let answer = e2e::http(&api.url, "POST", &pods, &kube_headers, &padded(KUBE_BODY + 1));
    assert_eq!(answer.status, 413, "{}", answer.body.chars().take(500).collect::<String>());
    let status: Value = answer.json();
    assert_eq!(status["reason"], "RequestEntityTooLarge", "{status}");
    assert_eq!(status["message"], format!("Request entity too large: limit is {KUBE_BODY}"), "{status}");
    let kube_streamed =
        [("Authorization", kube_auth.as_str()), ("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")];
    let answer = e2e::http(&api.url, "POST", &pods, &kube_streamed, &chunked(KUBE_BODY + 1));
    assert_eq!(answer.status, 413, "chunked: {}", answer.body.chars().take(500).collect::<String>());
    let answer = e2e::http(&api.url, "POST", &pods, &kube_headers, &padded(KUBE_BODY));
    assert!(
        answer.status != 413 && answer.status < 500,
        "exactly the limit: {}",
        answer.body.chars().take(500).collect::<String>()
    );
    let answer = e2e::http(&api.url, "POST", &pods, &[("Content-Type", "application/json")], &padded(KUBE_BODY + 1));
    assert_eq!(answer.status, 401, "without the token: {}", answer.body.chars().take(500).collect::<String>());

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        // The API's exec: 60 KiB of stdin passes, a message past 64 KiB ends the session.
        let mut session = api_exec(&api, &token, &["cat"]).await;
        let piece = vec![b'a'; 60 * 1024];
        session.send(Message::binary([&[exec_channel::STDIN][..], &piece].concat())).await.unwrap();
        let echoed = read_stdout(&mut session, piece.len()).await;
        assert_eq!(echoed.len(), piece.len(), "cat echoed {} bytes of 60 KiB", echoed.len());
        let too_big = [&[exec_channel::STDIN][..], &vec![b'b'; 64 * 1024 + 1]].concat();
        let _ = session.send(Message::binary(too_big)).await;
        let ended = ended_without(&mut session, b'b').await;
        assert!(ended.is_ok(), "the API's exec took a message past 64 KiB: {ended:?}");

        // The simulated Kubernetes' exec: 512 KiB passes, past 1 MiB ends the session.
        let pod = get(&api, &kube_token, &pods).json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|pod| pod["status"]["phase"] == "Running")
            .map(|pod| pod["metadata"]["name"].as_str().unwrap().to_owned())
            .expect("the job's pod");
        let mut session = kube_exec(&api, &vm, &kube_token, &pod).await;
        let piece = vec![b'a'; 512 * 1024];
        session.send(Message::binary([&[0u8][..], &piece].concat())).await.unwrap();
        let echoed = read_stdout(&mut session, piece.len()).await;
        assert_eq!(echoed.len(), piece.len(), "cat echoed {} bytes of 512 KiB", echoed.len());
        let _ = session.send(Message::binary([&[0u8][..], &vec![b'b'; 1024 * 1024 + 1]].concat())).await;
        let ended = ended_without(&mut session, b'b').await;
        assert!(ended.is_ok(), "the simulated exec took a message past 1 MiB: {ended:?}");
    });

    // Streams: 100 follows held, the next follow and an exec refused, one ends, a follow again.
    let follow = "/v1/deployments/long/logs?follow=true";
    let mut follows: Vec<TcpStream> = (0..100).map(|_| open_follow(&api, &token, follow).unwrap()).collect();
    let refused = get(&api, &token, follow);
    assert_eq!((refused.status, error_code(&refused).as_str()), (429, "TOO_MANY_STREAMS"), "{refused:?}");
    assert!(refused.headers.iter().any(|(name, value)| name == "retry-after" && value == "10"), "{refused:?}");
    assert!(refused.json()["error"]["message"].as_str().unwrap().contains("100 followed logs and exec sessions"));
    let exec = runtime.block_on(async {
        let url = format!("{}/v1/deployments/long/exec", api.url.replacen("http://", "ws://", 1));
        let mut request = url.into_client_request().unwrap();
        request.headers_mut().insert("Authorization", auth.parse().unwrap());
        match tokio_tungstenite::connect_async(request).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(answer)) => {
                let body = answer.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default().into_owned();
                (answer.status().as_u16(), body)
            }
            other => panic!("an exec past the stream limit: {other:?}"),
        }
    });
    assert!(exec.0 == 429 && exec.1.contains("TOO_MANY_STREAMS"), "{exec:?}");
    drop(follows.pop());
    let again =
        e2e::wait_until(Duration::from_secs(10), "a follow after one ended", || open_follow(&api, &token, follow));
    drop(again);
    drop(follows);
    let logs = api.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Opens a followed log and reads its answer's head: the stream, if it is `200`.
fn open_follow(api: &Api, token: &str, path: &str) -> Option<TcpStream> {
    let authority = api.url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(authority).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\n\r\n").as_bytes(),
        )
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).ok()?;
        head.push(byte[0]);
    }
    head.starts_with(b"HTTP/1.1 200").then_some(stream)
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// An exec session of the API in job `long`, its request sent.
async fn api_exec(api: &Api, token: &str, command: &[&str]) -> Socket {
    let url = format!("{}/v1/deployments/long/exec", api.url.replacen("http://", "ws://", 1));
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert("Authorization", format!("Bearer {token}").parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let exec = json!({ "command": command, "stdin": true }).to_string();
    socket.send(Message::text(exec)).await.unwrap();
    socket
}

/// An exec of `cat` in `pod` through the simulated Kubernetes' own exec (v5.channel.k8s.io).
async fn kube_exec(api: &Api, vm: &str, token: &str, pod: &str) -> Socket {
    let url = format!(
        "{}/sim/kube/{vm}/api/v1/namespaces/anycloud/pods/{pod}/exec?command=cat&stdin=true&stdout=true&stderr=true",
        api.url.replacen("http://", "ws://", 1)
    );
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert("Authorization", format!("Bearer {token}").parse().unwrap());
    request.headers_mut().insert("Sec-WebSocket-Protocol", "v5.channel.k8s.io".parse().unwrap());
    let (socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    socket
}

/// Reads stdout frames (channel 1, in both protocols) until `size` bytes came.
async fn read_stdout(socket: &mut Socket, size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < size {
        let message = tokio::time::timeout(Duration::from_secs(20), socket.next()).await;
        match message {
            Ok(Some(Ok(Message::Binary(data)))) if data.first() == Some(&1) => out.extend_from_slice(&data[1..]),
            Ok(Some(Ok(other))) => eprintln!("exec: {}", other.to_string().chars().take(300).collect::<String>()),
            other => {
                eprintln!("exec ended: {other:?}");
                break;
            }
        }
    }
    out
}

/// Waits for the session to end, and fails if any `marker` byte came back on stdout first.
async fn ended_without(socket: &mut Socket, marker: u8) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match tokio::time::timeout_at(deadline, socket.next()).await {
            Err(_) => return Err("still open after 20 s".to_owned()),
            Ok(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => return Ok(()),
            Ok(Some(Ok(Message::Binary(data)))) if data.first() == Some(&1) && data[1..].contains(&marker) => {
                return Err("the command read it".to_owned());
            }
            Ok(Some(Ok(_))) => {}
        }
    }
}
