//! An API whose state lives in a bucket (`api serve --checkpoint-bucket`), through the real
//! binary against moto's S3 and our fake GCS JSON API:
//!
//! - SIGKILLed in the middle of cluster creates, its disk wiped but for the keys its operator keeps
//!   (they never go to the bucket, and without them the restored database does not open), a fresh
//!   one restores from the bucket: everything it acknowledged is there, and every run finishes;
//! - a second API on the same bucket takes it over and the first one stops (exit 3) at its
//!   next write, which it never acknowledges;
//! - a truncated or corrupted object stops a restore with an error naming it, and no API starts.
#![allow(clippy::unwrap_used)]

use std::process::Stdio;
use std::time::Duration;

use anycloud_checkpoint::{Bucket, BucketUrl, GcsBucket, S3Access, S3Bucket, object};
use anycloud_tests::e2e::{self, Api, ApiOptions, Moto};
use anycloud_tests::fake_gcs::FakeGcs;
use bytes::Bytes;

const BUCKET: &str = "team-api-state";

/// The bucket under test and how an API reaches it.
enum Store {
    S3 {
        moto: Moto,
        raw: S3Bucket,
    },
    /// The GCS client's credentials refresh on the runtime that made them: one runtime for all.
    Gcs {
        fake: FakeGcs,
        raw: Box<GcsBucket>,
        rt: tokio::runtime::Runtime,
        key_file: tempfile::NamedTempFile,
    },
}

impl Store {
    fn s3() -> Self {
        let moto = Moto::start();
        let url = BucketUrl::parse(&format!("s3://{BUCKET}")).unwrap();
        let access = S3Access {
            keys: Some(("AKIAANYCLOUDCHECKPT1".into(), "checkpoint-test-secret".into())),
            region: Some("us-east-1".into()),
            endpoint: Some(moto.endpoint.clone()),
        };
        let raw = e2e::block_on(S3Bucket::new(&url, &access));
        e2e::block_on(async {
            raw.client().create_bucket().bucket(BUCKET).send().await.unwrap();
            let versioning = aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                .build();
            raw.client()
                .put_bucket_versioning()
                .bucket(BUCKET)
                .versioning_configuration(versioning)
                .send()
                .await
                .unwrap();
        });
        Self::S3 { moto, raw }
    }

    fn gcs() -> Self {
        let fake = e2e::block_on(FakeGcs::start());
        fake.create_bucket(BUCKET);
        let key_file = tempfile::NamedTempFile::new().unwrap();
        let key = anycloud_tests::gcp_test_key::service_account_json();
        std::fs::write(key_file.path(), &key).unwrap();
        let url = BucketUrl::parse(&format!("gs://{BUCKET}")).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let raw = rt.block_on(GcsBucket::new(&url, Some(&key), Some(&fake.endpoint()))).unwrap();
        Self::Gcs { fake, raw: Box::new(raw), rt, key_file }
    }

    /// `api serve` arguments naming the bucket under `prefix`.
    fn args(&self, prefix: &str) -> Vec<String> {
        let (url, endpoint) = match self {
            Self::S3 { moto, .. } => (format!("s3://{BUCKET}/{prefix}"), moto.endpoint.clone()),
            Self::Gcs { fake, .. } => (format!("gs://{BUCKET}/{prefix}"), fake.endpoint()),
        };
        vec!["--checkpoint-bucket".into(), url, "--checkpoint-endpoint".into(), endpoint]
    }

    /// The API process's credentials for the bucket: what a VM's role or service account gives.
    fn env(&self) -> Vec<(String, String)> {
        match self {
            Self::S3 { .. } => vec![
                ("AWS_ACCESS_KEY_ID".into(), "AKIAANYCLOUDCHECKPT1".into()),
                ("AWS_SECRET_ACCESS_KEY".into(), "checkpoint-test-secret".into()),
                ("AWS_REGION".into(), "us-east-1".into()),
            ],
            Self::Gcs { key_file, .. } => {
                vec![("GOOGLE_APPLICATION_CREDENTIALS".into(), key_file.path().display().to_string())]
            }
        }
    }

    fn get(&self, key: &str) -> Option<Bytes> {
        match self {
            Self::S3 { raw, .. } => e2e::block_on(raw.get(key)).unwrap().map(|(body, _)| body),
            Self::Gcs { raw, rt, .. } => rt.block_on(raw.get(key)).unwrap().map(|(body, _)| body),
        }
    }

    /// Overwrites an object behind the API's back (no precondition), as damage would.
    fn put_raw(&self, key: &str, body: Bytes) {
        match self {
            Self::S3 { raw, .. } => e2e::block_on(async {
                let body = aws_sdk_s3::primitives::ByteStream::from(body);
                raw.client().put_object().bucket(BUCKET).key(key).body(body).send().await.unwrap();
            }),
            // A new write (new hashes): the store's own checksum passes, ours must not.
            Self::Gcs { raw, fake, rt, .. } => {
                rt.block_on(raw.delete(&[key.to_owned()])).unwrap();
                fake.put_raw(BUCKET, key, body);
            }
        }
    }

    fn head(&self, prefix: &str) -> anycloud_checkpoint::layout::Head {
        serde_json::from_slice(&self.get(&format!("{prefix}/HEAD")).expect("a HEAD")).unwrap()
    }
}

fn start(store: &Store, prefix: &str) -> Api {
    start_with_env(store, prefix, Vec::new())
}

fn start_with_env(store: &Store, prefix: &str, env: Vec<(String, String)>) -> Api {
    Api::start_opts(ApiOptions {
        id: "team-api".into(),
        hosted: true,
        env: [store.env(), env].concat(),
        args: store.args(prefix),
        ..ApiOptions::default()
    })
}

fn cluster_status(api: &Api, name: &str) -> String {
    let out = api.cli(&["--json", "cluster", "status", name]);
    out.expect_code(0);
    out.json()["cluster"]["phase"].as_str().unwrap_or_default().to_owned()
}

/// Everything acknowledged before a SIGKILL is there after a restore on an empty disk, and the
/// runs that were under way finish.
fn restore_after_sigkill_on_a_wiped_disk(store: &Store) {
    let mut api = start(store, "restore");
    let token = api.token();
    api.cli(&["credentials", "new", "sim-a", "--provider", "sim", "--wait"]).expect_code(0);
    let mut clusters = Vec::new();
    for n in 0..4 {
        let name = format!("c{n}");
        api.cli(&e2e::sim_cluster_create(&name, "sim-a", "1")).expect_code(0);
        clusters.push(name);
    }
    for n in 0..6 {
        api.cli(&["credentials", "new", &format!("later-{n}"), "--provider", "sim"]).expect_code(0);
    }
    // The last answer is in; the runs are mid-way (a simulated VM boots in seconds).
    api.kill();
    for secret in ["token", "secret.key", "tls-ca.key"] {
        assert!(store.get(&format!("restore/identity/{secret}")).is_none(), "{secret} is in the bucket");
    }
    // Without its sealing key (a fresh data directory) the restored database does not open, and
    // nothing starts.
    let (code, stderr) = serve_fails(&api, store, "restore");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("SECRET_KEY_MISMATCH") && stderr.contains("secret.key"), "{stderr}");
    api.wipe_data_dir_keeping_keys();
    api.restart();
    assert!(api.logs().contains("restored from "), "{}", api.logs());
    assert_eq!(api.token(), token, "the operator's token");
    let names: Vec<String> =
        api.credentials().iter().map(|credential| credential["name"].as_str().unwrap().to_owned()).collect();
    for expected in ["sim-a", "later-0", "later-5"] {
        assert!(names.iter().any(|name| name == expected), "{expected} was acknowledged and lost: {names:?}");
    }
    for name in &clusters {
        let ready = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e2e::wait_until(Duration::from_secs(120), &format!("cluster {name} ready"), || {
                (cluster_status(&api, name) == "ready").then_some(())
            })
        }));
        if ready.is_err() {
            let status = api.cli(&["--json", "cluster", "status", name]).json();
            let run = status["cluster"]["workflow_id"].as_str().unwrap_or_default().to_owned();
            panic!("cluster {name} did not get ready: {status:#}\n{:#}\n{}", api.inspect(&run, true), api.logs());
        }
    }
    assert_eq!(store.head("restore").api, "team-api");
    let status = api.cli(&["api", "status"]);
    status.expect_code(0);
    let generation = store.head("restore").generation;
    assert!(status.stdout.contains(&format!("/restore/: generation {generation}, snapshot ")), "{status}");
    api.kill();
}

/// A second API on the same bucket takes it over; the first stops at its next write.
fn a_second_api_fences_the_first(store: &Store) {
    // Both run with the same sealing key, as two machines of one operator would.
    let key = vec![("ANYCLOUD_SECRET_KEY".to_owned(), "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".to_owned())];
    let mut first = start_with_env(store, "fence", key.clone());
    first.cli(&["credentials", "new", "before", "--provider", "sim", "--wait"]).expect_code(0);
    let generation = store.head("fence").generation;
    let mut second = start_with_env(store, "fence", key);
    assert_ne!(store.head("fence").generation, generation, "the second API began its own generation");
    // The first API's next write cannot be acknowledged: it stops instead.
    let out = first.cli(&["credentials", "new", "after", "--provider", "sim"]);
    assert_ne!(out.code, 0, "a fenced API acknowledged a write: {out}\n{}\n{}", first.logs(), second.logs());
    let status = first.wait_exit(Duration::from_secs(30)).expect("the fenced API stopped");
    assert_eq!(status.code(), Some(3), "{}", first.logs());
    assert!(first.logs().contains("CHECKPOINT_FENCED"), "{}", first.logs());
    // The second has what the first acknowledged, and not what it did not.
    let names: Vec<String> =
        second.credentials().iter().map(|credential| credential["name"].as_str().unwrap().to_owned()).collect();
    assert!(names.contains(&"before".to_owned()), "{names:?}");
    assert!(!names.contains(&"after".to_owned()), "{names:?}");
    second.cli(&["credentials", "new", "on-second", "--provider", "sim"]).expect_code(0);
    second.kill();
}

/// `api serve` on the bucket, expected to fail before it listens.
fn serve_fails(api: &Api, store: &Store, prefix: &str) -> (i32, String) {
    let data = api.scratch().join(format!("fresh-{}", uuid::Uuid::new_v4().simple()));
    let output = api
        .command()
        .args(["api", "serve", "--id", "team-api", "--port", "0", "--hosted-by", "sim", "--allow-insecure-endpoints"])
        .arg("--data-dir")
        .arg(&data)
        .args(store.args(prefix))
        .envs(store.env())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("listening on"), "a damaged checkpoint started an API: {stdout}");
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// A truncated segment and a corrupted snapshot each stop a restore, named; put back, the
/// restore works.
fn damage_stops_a_restore(store: &Store) {
    let mut api = start(store, "damage");
    api.cli(&["credentials", "new", "sim-a", "--provider", "sim", "--wait"]).expect_code(0);
    api.kill();
    let generation = store.head("damage").generation;
    let segment = format!("damage/generations/{generation}/wal/0000000000");
    let snapshot = format!("damage/generations/{generation}/snapshot");
    let good_segment = store.get(&segment).expect("a WAL segment was shipped");
    let good_snapshot = store.get(&snapshot).unwrap();
    object::open(&good_segment).unwrap();

    store.put_raw(&segment, good_segment.slice(..good_segment.len() - 10));
    let (code, stderr) = serve_fails(&api, store, "damage");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("CHECKPOINT_RESTORE_FAILED") && stderr.contains(&segment), "{stderr}");
    assert!(stderr.contains("truncated"), "{stderr}");
    store.put_raw(&segment, good_segment.clone());

    let mut flipped = good_snapshot.to_vec();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x40;
    store.put_raw(&snapshot, Bytes::from(flipped));
    let (code, stderr) = serve_fails(&api, store, "damage");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(&snapshot) && stderr.contains("corrupted"), "{stderr}");
    store.put_raw(&snapshot, good_snapshot);

    api.wipe_data_dir_keeping_keys();
    api.restart();
    assert!(api.credentials().iter().any(|credential| credential["name"] == "sim-a"));
    api.kill();
}

#[test]
fn s3_restore_after_sigkill_on_a_wiped_disk() {
    restore_after_sigkill_on_a_wiped_disk(&Store::s3());
}

#[test]
fn s3_a_second_api_fences_the_first() {
    a_second_api_fences_the_first(&Store::s3());
}

#[test]
fn s3_damage_stops_a_restore() {
    damage_stops_a_restore(&Store::s3());
}

#[test]
fn gcs_restore_after_sigkill_on_a_wiped_disk() {
    restore_after_sigkill_on_a_wiped_disk(&Store::gcs());
}

#[test]
fn gcs_a_second_api_fences_the_first() {
    a_second_api_fences_the_first(&Store::gcs());
}

#[test]
fn gcs_damage_stops_a_restore() {
    damage_stops_a_restore(&Store::gcs());
}
