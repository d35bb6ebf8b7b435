//! The checkpoint's GCS bucket (`GcsBucket`) against the fake Cloud Storage server: the four
//! bucket calls, their conditional writes, how failures map to `BucketError`, which calls the
//! crate retries, that corrupted bytes are an error rather than an answer, and the bucket's own
//! making (`ensure`) and removal (`destroy`). Everything goes
//! through google-cloud-storage with the test service-account key (a JWT it signs locally); what
//! is asserted of the bucket's state is asked of the fake, not of `GcsBucket`.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};

use anycloud_checkpoint::provision::{Made, NONCURRENT_DAYS};
use anycloud_checkpoint::{Bucket, BucketError, BucketUrl, GcsBucket, Version};
use anycloud_tests::fake_gcs::FakeGcs;
use anycloud_tests::gcp_test_key::{CLIENT_EMAIL, PROJECT, service_account_json};
use axum::body::Bytes;
use serde_json::json;

const BUCKET: &str = "team-api-state";
/// A key with `/`s, as the checkpoint's prefixed keys are: the crate sends it as `%2F`.
const KEY: &str = "apis/team/snapshot.db";

/// A fake with [`BUCKET`], and a `GcsBucket` on it whose owner check has passed (so that the
/// requests a test counts or fails are the object calls').
async fn setup() -> (FakeGcs, GcsBucket) {
    let fake = FakeGcs::start().await;
    fake.create_bucket(BUCKET);
    let bucket = gcs_bucket(&fake, BUCKET).await;
    bucket.check_owner().await.unwrap();
    (fake, bucket)
}

async fn gcs_bucket(fake: &FakeGcs, name: &str) -> GcsBucket {
    let url = BucketUrl::parse(&format!("gs://{name}/apis/team")).unwrap();
    GcsBucket::new(&url, Some(&service_account_json()), Some(&fake.endpoint())).await.unwrap()
}

/// Bytes that look like a SQLite page with a multipart delimiter inside, to catch a body
/// split on the wrong boundary.
fn payload(seed: u8, len: usize) -> Bytes {
    let mut bytes: Vec<u8> = b"SQLite format 3\0\r\n--boundary\r\n".to_vec();
    let mut x = u32::from(seed) | 1;
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes.push(x as u8);
    }
    bytes.truncate(len);
    Bytes::from(bytes)
}

/// The fake's generation of the object, as a `Version`.
fn stored_version(fake: &FakeGcs, key: &str) -> Option<Version> {
    fake.objects(BUCKET).into_iter().find(|o| o.name == key).map(|o| Version(o.generation.to_string()))
}

fn stored_bytes(fake: &FakeGcs, key: &str) -> Option<Bytes> {
    fake.objects(BUCKET).into_iter().find(|o| o.name == key).map(|o| o.bytes)
}

/// The requests of one kind the fake saw (`POST /upload`, `GET /storage`, ...).
fn requests(fake: &FakeGcs, prefix: &str) -> Vec<String> {
    fake.requests().into_iter().filter(|r| r.starts_with(prefix)).collect()
}

#[tokio::test]
async fn a_missing_object_reads_as_none() {
    let (fake, bucket) = setup().await;
    assert_eq!(bucket.get(KEY).await.unwrap(), None);
    // The name went percent-encoded, and the request did reach the fake.
    assert_eq!(
        requests(&fake, &format!("GET /storage/v1/b/{BUCKET}/o")),
        vec![format!("GET /storage/v1/b/{BUCKET}/o/apis%2Fteam%2Fsnapshot.db?alt=media")]
    );
}

#[tokio::test]
async fn create_then_get_round_trips_the_bytes_and_the_generation() {
    let (fake, bucket) = setup().await;
    let body = payload(1, 70_000);
    let version = bucket.create(KEY, body.clone()).await.unwrap();
    assert_eq!(Some(&version), stored_version(&fake, KEY).as_ref(), "the version is the object's generation");
    assert_eq!(stored_bytes(&fake, KEY), Some(body.clone()), "the fake stored exactly the bytes sent");
    let (read, read_version) = bucket.get(KEY).await.unwrap().unwrap();
    assert_eq!((read, read_version), (body, version));
    // One single-shot upload that told the service the object must not exist yet.
    let uploads = requests(&fake, "POST /upload");
    assert_eq!(uploads.len(), 1, "{uploads:?}");
    assert!(uploads[0].contains("uploadType=multipart") && uploads[0].contains("ifGenerationMatch=0"), "{uploads:?}");
}

#[tokio::test]
async fn a_second_create_of_a_key_is_a_conflict() {
    let (fake, bucket) = setup().await;
    let first = bucket.create(KEY, payload(1, 100)).await.unwrap();
    let err = bucket.create(KEY, payload(2, 100)).await.unwrap_err();
    assert!(matches!(&err, BucketError::Conflict(key) if key == KEY), "{err:?}");
    assert_eq!(stored_version(&fake, KEY), Some(first), "the loser changed nothing");
    assert_eq!(stored_bytes(&fake, KEY), Some(payload(1, 100)));
}

#[tokio::test]
async fn replace_needs_the_version_it_read() {
    let (fake, bucket) = setup().await;
    let v1 = bucket.create(KEY, payload(1, 100)).await.unwrap();
    let v2 = bucket.replace(KEY, payload(2, 200), &v1).await.unwrap();
    assert_ne!(v2, v1);
    assert!(v2.0.parse::<i64>().unwrap() > v1.0.parse::<i64>().unwrap(), "generations grow: {v1:?} {v2:?}");
    assert_eq!(bucket.get(KEY).await.unwrap(), Some((payload(2, 200), v2.clone())));

    // A writer still holding v1 lost the race.
    let err = bucket.replace(KEY, payload(3, 300), &v1).await.unwrap_err();
    assert!(matches!(&err, BucketError::Conflict(key) if key == KEY), "{err:?}");
    assert_eq!(stored_version(&fake, KEY), Some(v2.clone()));
    assert_eq!(stored_bytes(&fake, KEY), Some(payload(2, 200)));

    // So did one replacing an object deleted under it.
    bucket.delete(&[KEY.to_owned()]).await.unwrap();
    let err = bucket.replace(KEY, payload(4, 400), &v2).await.unwrap_err();
    assert!(matches!(&err, BucketError::Conflict(_)), "{err:?}");
    assert_eq!(stored_version(&fake, KEY), None);
}

#[tokio::test]
async fn delete_removes_and_deleting_again_is_fine() {
    let (fake, bucket) = setup().await;
    let other = "apis/team/wal-0001";
    bucket.create(KEY, payload(1, 10)).await.unwrap();
    bucket.create(other, payload(2, 10)).await.unwrap();
    let keep = bucket.create("apis/other/snapshot.db", payload(3, 10)).await.unwrap();

    bucket.delete(&[KEY.to_owned(), other.to_owned()]).await.unwrap();
    let left: Vec<String> = fake.objects(BUCKET).into_iter().map(|o| o.name).collect();
    assert_eq!(left, vec!["apis/other/snapshot.db"]);
    assert_eq!(stored_version(&fake, "apis/other/snapshot.db"), Some(keep));
    assert_eq!(bucket.get(KEY).await.unwrap(), None);

    bucket.delete(&[KEY.to_owned(), other.to_owned()]).await.unwrap();
    bucket.delete(&[]).await.unwrap();
    assert_eq!(requests(&fake, "DELETE").len(), 4, "each key is one request, the absent ones too");
    assert_eq!(requests(&fake, "DELETE")[0], format!("DELETE /storage/v1/b/{BUCKET}/o/apis%2Fteam%2Fsnapshot.db"));
}

#[tokio::test]
async fn a_missing_bucket_is_refused_naming_the_bucket() {
    let fake = FakeGcs::start().await;
    let bucket = gcs_bucket(&fake, "no-such-bucket").await;
    let refused = |what: &str, result: Result<(), BucketError>| match result {
        Err(BucketError::Refused(message)) => {
            assert!(message.contains("gs://no-such-bucket") && message.contains("does not exist"), "{what}: {message}");
        }
        other => panic!("{what}: {other:?}"),
    };
    refused("get", bucket.get(KEY).await.map(drop));
    refused("create", bucket.create(KEY, payload(1, 10)).await.map(drop));
    refused("replace", bucket.replace(KEY, payload(1, 10), &Version("1".into())).await.map(drop));
    refused("delete", bucket.delete(&[KEY.to_owned()]).await);
    assert!(!fake.bucket_exists("no-such-bucket"), "no call created the bucket");
}

#[tokio::test]
async fn denied_and_unauthenticated_calls_are_refused_with_what_to_check() {
    let (fake, bucket) = setup().await;
    fake.fail_next(1, 403);
    let err = bucket.create(KEY, payload(1, 10)).await.unwrap_err();
    let BucketError::Refused(message) = &err else { panic!("{err:?}") };
    assert!(
        message.contains(CLIENT_EMAIL) && message.contains(BUCKET) && message.contains("roles/storage.objectAdmin"),
        "{message}"
    );
    fake.fail_next(1, 401);
    let err = bucket.get(KEY).await.unwrap_err();
    let BucketError::Refused(message) = &err else { panic!("{err:?}") };
    assert!(message.contains("HTTP 401") && message.contains(BUCKET) && message.contains("key"), "{message}");
    fake.fail_next(1, 403);
    let err = bucket.delete(&[KEY.to_owned()]).await.unwrap_err();
    assert!(matches!(&err, BucketError::Refused(m) if m.contains("HTTP 403")), "{err:?}");
}

#[tokio::test]
async fn a_key_that_cannot_sign_is_refused_before_any_request() {
    let fake = FakeGcs::start().await;
    fake.create_bucket(BUCKET);
    let mut key: serde_json::Value = serde_json::from_str(&service_account_json()).unwrap();
    key["private_key"] = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n".into();
    let url = BucketUrl::parse(&format!("gs://{BUCKET}")).unwrap();
    let bucket = GcsBucket::new(&url, Some(&key.to_string()), Some(&fake.endpoint())).await.unwrap();
    for (what, result) in [
        ("get", bucket.get(KEY).await.map(drop)),
        ("create", bucket.create(KEY, payload(1, 10)).await.map(drop)),
        ("delete", bucket.delete(&[KEY.to_owned()]).await),
    ] {
        let Err(BucketError::Refused(message)) = &result else { panic!("{what}: {result:?}") };
        assert!(message.contains(CLIENT_EMAIL) && message.contains(BUCKET), "{what}: {message}");
    }
    assert_eq!(fake.requests(), Vec::<String>::new());
}

#[tokio::test]
async fn a_corrupted_object_fails_the_read_instead_of_returning_its_bytes() {
    let (fake, bucket) = setup().await;
    let body = payload(1, 4096);
    bucket.create(KEY, body.clone()).await.unwrap();

    // One flipped bit at rest, same length: only the CRC32C can tell.
    let mut flipped = body.to_vec();
    flipped[2000] ^= 0x01;
    fake.put_raw(BUCKET, KEY, flipped);
    let read = bucket.get(KEY).await;
    assert!(
        matches!(&read, Err(BucketError::Failed(m)) if m.contains("CRC32C") && m.contains(KEY)),
        "{:?}",
        read.map(|object| object.map(|(bytes, version)| (bytes.len(), version)))
    );

    // A truncated object (the download is complete, just short).
    fake.put_raw(BUCKET, KEY, body.clone());
    assert_eq!(bucket.get(KEY).await.unwrap().map(|(b, _)| b), Some(body), "restored bytes read again");
    fake.truncate(BUCKET, KEY, 1000);
    let read = bucket.get(KEY).await;
    assert!(
        matches!(&read, Err(BucketError::Failed(m)) if m.contains("CRC32C")),
        "{:?}",
        read.map(|object| object.map(|(bytes, version)| (bytes.len(), version)))
    );
}

#[tokio::test]
async fn writes_are_sent_once_and_reads_are_retried() {
    let (fake, bucket) = setup().await;
    fake.fail_next(1, 503);
    let err = bucket.create(KEY, payload(1, 10)).await.unwrap_err();
    assert!(matches!(&err, BucketError::Failed(m) if m.contains("503")), "{err:?}");
    assert_eq!(requests(&fake, "POST /upload").len(), 1, "the crate did not retry the write");
    assert_eq!(stored_version(&fake, KEY), None);

    let version = bucket.create(KEY, payload(1, 10)).await.unwrap();
    fake.fail_next(1, 503);
    assert_eq!(bucket.get(KEY).await.unwrap(), Some((payload(1, 10), version)));
    assert_eq!(requests(&fake, &format!("GET /storage/v1/b/{BUCKET}/o")).len(), 2, "the crate retried the read once");
}

#[tokio::test]
async fn a_write_to_an_unreachable_endpoint_fails_at_once() {
    // A port nobody listens on any more.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = BucketUrl::parse(&format!("gs://{BUCKET}")).unwrap();
    let endpoint = format!("http://{closed}");
    let bucket = GcsBucket::new(&url, Some(&service_account_json()), Some(&endpoint)).await.unwrap();
    let started = std::time::Instant::now();
    let err = bucket.create(KEY, payload(1, 10)).await.unwrap_err();
    assert!(matches!(&err, BucketError::Failed(m) if m.contains("connect")), "{err:?}");
    let err = bucket.delete(&[KEY.to_owned()]).await.unwrap_err();
    assert!(matches!(&err, BucketError::Failed(_)), "{err:?}");
    // The crate's default would keep reconnecting for five minutes before answering.
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "took {:?}", started.elapsed());
}

/// The case that rules out retrying writes: the create happened, its response was lost. The
/// caller gets `Failed` (not `Conflict`), and its own retry then gets `Conflict`: only a read
/// of the object (its generation, its bytes) tells whose write it is.
#[tokio::test]
async fn a_create_whose_response_is_lost_is_failed_not_conflict() {
    let (fake, bucket) = setup().await;
    fake.lose_next(1);
    let err = bucket.create(KEY, payload(1, 10)).await.unwrap_err();
    assert!(matches!(&err, BucketError::Failed(_)), "{err:?}");
    let written = stored_version(&fake, KEY).expect("the create took effect");
    let err = bucket.create(KEY, payload(1, 10)).await.unwrap_err();
    assert!(matches!(&err, BucketError::Conflict(_)), "{err:?}");
    assert_eq!(bucket.get(KEY).await.unwrap(), Some((payload(1, 10), written)));
}

#[tokio::test]
async fn a_large_snapshot_goes_in_one_multipart_request() {
    let (fake, bucket) = setup().await;
    let body = payload(7, 12 * 1024 * 1024);
    let version = bucket.create(KEY, body.clone()).await.unwrap();
    let uploads = requests(&fake, "POST /upload");
    assert_eq!(uploads.len(), 1, "{uploads:?}");
    assert!(uploads[0].contains("uploadType=multipart"), "{uploads:?}");
    assert_eq!(bucket.get(KEY).await.unwrap(), Some((body, version)));
}

/// One raw HTTP/1.1 exchange with the fake; the status code and the body.
fn raw(fake: &FakeGcs, method: &str, path: &str, authorization: Option<&str>, body: &str) -> (u16, String) {
    let addr = fake.endpoint().trim_start_matches("http://").to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split(' ').nth(1).unwrap().parse().unwrap();
    (status, response.split_once("\r\n\r\n").unwrap().1.to_owned())
}

#[tokio::test]
async fn the_fake_wants_a_bearer_token_and_creates_buckets_as_the_json_api_does() {
    let fake = FakeGcs::start().await;
    let (status, body) = raw(&fake, "GET", "/storage/v1/b/x-bucket", None, "");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("\"reason\":\"required\""), "{body}");

    let bearer = Some("Bearer test-token");
    let insert = r#"{"name":"new-bucket","versioning":{"enabled":true},"iamConfiguration":{"uniformBucketLevelAccess":{"enabled":true}}}"#;
    let (status, body) = raw(&fake, "POST", "/storage/v1/b?project=anycloud-test", bearer, insert);
    assert_eq!(status, 200, "{body}");
    let resource: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(resource["name"], "new-bucket");
    assert_eq!(resource["versioning"]["enabled"], true);
    assert!(fake.bucket_exists("new-bucket"));
    let (status, _) = raw(&fake, "POST", "/storage/v1/b?project=anycloud-test", bearer, insert);
    assert_eq!(status, 409);
    let (status, body) = raw(&fake, "GET", "/storage/v1/b/new-bucket", bearer, "");
    assert_eq!((status, serde_json::from_str::<serde_json::Value>(&body).unwrap()), (200, resource));
    let (status, body) = raw(&fake, "GET", "/storage/v1/b/other-bucket", bearer, "");
    assert_eq!(status, 404);
    assert!(body.contains("The specified bucket does not exist."), "{body}");
}

/// The lifecycle rule every checkpoint bucket gets: noncurrent generations expire.
fn expiry_rule() -> serde_json::Value {
    json!({"action": {"type": "Delete"}, "condition": {"daysSinceNoncurrentTime": NONCURRENT_DAYS, "isLive": false}})
}

/// Asserts the bucket is versioned, private and expiring noncurrent generations.
fn assert_versioned_and_private(fake: &FakeGcs, name: &str) -> serde_json::Value {
    let resource = fake.bucket(name).unwrap();
    assert_eq!(resource["versioning"]["enabled"], true, "{resource}");
    assert_eq!(resource["iamConfiguration"]["uniformBucketLevelAccess"]["enabled"], true, "{resource}");
    assert_eq!(resource["iamConfiguration"]["publicAccessPrevention"], "enforced", "{resource}");
    let rules = resource["lifecycle"]["rule"].as_array().unwrap();
    assert!(rules.contains(&expiry_rule()), "{resource}");
    resource
}

#[tokio::test]
async fn ensure_creates_a_versioned_private_bucket_and_a_second_ensure_adopts_it_unchanged() {
    let fake = FakeGcs::start().await;
    let bucket = gcs_bucket(&fake, BUCKET).await;
    assert_eq!(bucket.ensure().await.unwrap(), Made::Created);
    let created = assert_versioned_and_private(&fake, BUCKET);
    assert_eq!(created["lifecycle"]["rule"], json!([expiry_rule()]));
    // Created in the key's project, in one request.
    assert_eq!(requests(&fake, "POST"), vec![format!("POST /storage/v1/b?project={PROJECT}")]);

    assert_eq!(bucket.ensure().await.unwrap(), Made::Adopted);
    assert_eq!(fake.bucket(BUCKET), Some(created), "not even the metageneration changed");
    assert_eq!(requests(&fake, "POST").len(), 1);
    assert_eq!(requests(&fake, "PATCH"), Vec::<String>::new());

    // The checkpoint's calls work on it, and versioning keeps what a replace replaced.
    let v1 = bucket.create(KEY, payload(1, 10)).await.unwrap();
    bucket.replace(KEY, payload(2, 10), &v1).await.unwrap();
    let generations = fake.generations(BUCKET);
    assert_eq!(
        generations.iter().map(|o| (o.live, o.bytes.clone())).collect::<Vec<_>>(),
        [(false, payload(1, 10)), (true, payload(2, 10))]
    );
}

#[tokio::test]
async fn ensure_makes_an_adopted_bucket_versioned_and_private_keeping_its_own_rules() {
    let fake = FakeGcs::start().await;
    let theirs = json!({"action": {"type": "SetStorageClass", "storageClass": "NEARLINE"}, "condition": {"age": 90}});
    let insert = json!({"name": BUCKET, "labels": {"team": "a"}, "lifecycle": {"rule": [theirs]}}).to_string();
    let (status, body) = raw(&fake, "POST", &format!("/storage/v1/b?project={PROJECT}"), Some("Bearer t"), &insert);
    assert_eq!(status, 200, "{body}");
    let bucket = gcs_bucket(&fake, BUCKET).await;

    assert_eq!(bucket.ensure().await.unwrap(), Made::Adopted);
    let adopted = assert_versioned_and_private(&fake, BUCKET);
    assert_eq!(adopted["lifecycle"]["rule"], json!([theirs, expiry_rule()]), "the owner's rule is kept");
    assert_eq!(adopted["labels"], json!({"team": "a"}));
    // One patch, conditional on the settings it read.
    assert_eq!(requests(&fake, "PATCH"), vec![format!("PATCH /storage/v1/b/{BUCKET}?ifMetagenerationMatch=1")]);
    assert_eq!(requests(&fake, "POST /storage").len(), 1, "the test's insert only");

    assert_eq!(bucket.ensure().await.unwrap(), Made::Adopted);
    assert_eq!(fake.bucket(BUCKET), Some(adopted));
    assert_eq!(requests(&fake, "PATCH").len(), 1);
}

#[tokio::test]
async fn ensure_on_a_bucket_these_credentials_may_not_use_is_refused() {
    let fake = FakeGcs::start().await;
    fake.create_foreign_bucket(BUCKET);
    let before = fake.bucket(BUCKET);
    let bucket = gcs_bucket(&fake, BUCKET).await;
    let err = bucket.ensure().await.unwrap_err();
    let BucketError::Refused(message) = &err else { panic!("{err:?}") };
    assert!(
        message.contains(&format!("gs://{BUCKET}"))
            && message.contains(CLIENT_EMAIL)
            && message.contains("HTTP 403")
            && message.contains("name another bucket"),
        "{message}"
    );
    assert_eq!(fake.bucket(BUCKET), before, "nothing changed");
    assert_eq!(requests(&fake, "POST"), Vec::<String>::new());
    assert_eq!(requests(&fake, "PATCH"), Vec::<String>::new());
    // destroy may not touch it either.
    let err = bucket.destroy().await.unwrap_err();
    assert!(matches!(&err, BucketError::Refused(m) if m.contains("HTTP 403")), "{err:?}");
    assert!(fake.bucket_exists(BUCKET));
}

/// A bucket made by someone between `ensure`'s look (404) and its create (409): adopted when
/// these credentials can use it, refused when the name went to another project.
#[tokio::test]
async fn a_bucket_made_between_the_look_and_the_create_is_looked_at_again() {
    let fake = FakeGcs::start().await;
    fake.create_bucket(BUCKET);
    fake.fail_next(1, 404);
    let bucket = gcs_bucket(&fake, BUCKET).await;
    assert_eq!(bucket.ensure().await.unwrap(), Made::Adopted);
    assert_versioned_and_private(&fake, BUCKET);
    let calls: Vec<String> = fake.requests().into_iter().map(|r| r.split('?').next().unwrap().to_owned()).collect();
    let at = format!("/storage/v1/b/{BUCKET}");
    let owner = "GET /storage/v1/b".to_owned();
    assert_eq!(
        calls,
        [format!("GET {at}"), "POST /storage/v1/b".to_owned(), format!("GET {at}"), owner, format!("PATCH {at}")]
    );

    let taken = "taken-by-another-project";
    fake.create_foreign_bucket(taken);
    fake.fail_next(1, 404);
    let err = gcs_bucket(&fake, taken).await.ensure().await.unwrap_err();
    assert!(matches!(&err, BucketError::Refused(m) if m.contains("name another bucket")), "{err:?}");
}

/// A key that names no project can neither create a bucket (no project to put it in) nor adopt
/// one (no project to check it belongs to).
#[tokio::test]
async fn a_key_that_names_no_project_neither_creates_nor_adopts() {
    let fake = FakeGcs::start().await;
    let mut key: serde_json::Value = serde_json::from_str(&service_account_json()).unwrap();
    key["project_id"] = "".into();
    let url = BucketUrl::parse(&format!("gs://{BUCKET}")).unwrap();
    let bucket = GcsBucket::new(&url, Some(&key.to_string()), Some(&fake.endpoint())).await.unwrap();
    let err = bucket.ensure().await.unwrap_err();
    let BucketError::Refused(message) = &err else { panic!("{err:?}") };
    assert!(message.contains("does not exist") && message.contains("service-account key"), "{message}");
    assert_eq!(requests(&fake, "POST"), Vec::<String>::new());

    fake.create_bucket(BUCKET);
    let before = fake.bucket(BUCKET);
    let err = bucket.ensure().await.unwrap_err();
    let BucketError::Refused(message) = &err else { panic!("{err:?}") };
    assert!(message.contains("names no project") && message.contains(&format!("gs://{BUCKET}")), "{message}");
    assert!(bucket.create(KEY, payload(1, 10)).await.is_err());
    assert_eq!(fake.bucket(BUCKET), before, "nothing changed");
    assert!(fake.objects(BUCKET).is_empty());
}

/// Bucket sniping: another project made the bucket first and opened it to everyone. Every call
/// would work on it; only its project number says it is not ours. It is refused by `ensure`
/// (neither adopted nor changed), by each object call, and by `destroy`.
#[tokio::test]
async fn a_bucket_of_another_project_is_never_adopted_read_or_written() {
    let fake = FakeGcs::start().await;
    fake.create_bucket_in("sniper-project", BUCKET);
    let before = fake.bucket(BUCKET);
    let refused = |what: &str, result: Result<(), BucketError>| {
        let Err(BucketError::Refused(message)) = &result else { panic!("{what}: {result:?}") };
        let number = anycloud_tests::fake_gcs::project_number("sniper-project").to_string();
        assert!(
            message.contains(&format!("gs://{BUCKET}"))
                && message.contains(&number)
                && message.contains(&format!("not to project `{PROJECT}`"))
                && message.contains("name another bucket"),
            "{what}: {message}"
        );
    };
    let bucket = gcs_bucket(&fake, BUCKET).await;
    refused("ensure", bucket.ensure().await.map(drop));
    refused("get", bucket.get(KEY).await.map(drop));
    refused("create", bucket.create(KEY, payload(1, 10)).await.map(drop));
    refused("replace", bucket.replace(KEY, payload(1, 10), &Version("1".into())).await.map(drop));
    refused("delete", bucket.delete(&[KEY.to_owned()]).await);
    refused("destroy", bucket.destroy().await.map(drop));
    assert_eq!(fake.bucket(BUCKET), before, "its settings were not touched");
    assert!(fake.objects(BUCKET).is_empty(), "nothing was written to it");
    let touched: Vec<String> =
        fake.requests().into_iter().filter(|r| !r.starts_with("GET /storage/v1/b/") || r.contains("/o")).collect();
    assert!(touched.iter().all(|r| r.starts_with("GET /storage/v1/b?project=")), "{touched:?}");

    // The same name in our own project is ours: adopted, and used.
    let fake = FakeGcs::start().await;
    fake.create_bucket_in(PROJECT, BUCKET);
    let bucket = gcs_bucket(&fake, BUCKET).await;
    assert_eq!(bucket.ensure().await.unwrap(), Made::Adopted);
    bucket.create(KEY, payload(1, 10)).await.unwrap();
}

#[tokio::test]
async fn destroy_deletes_every_generation_then_the_bucket() {
    let fake = FakeGcs::start().await;
    // Two items a page: five generations take three pages.
    fake.set_list_page_size(2);
    let bucket = gcs_bucket(&fake, BUCKET).await;
    bucket.ensure().await.unwrap();
    let v1 = bucket.create(KEY, payload(1, 10)).await.unwrap();
    let v2 = bucket.replace(KEY, payload(2, 10), &v1).await.unwrap();
    bucket.replace(KEY, payload(3, 10), &v2).await.unwrap();
    let wal = "apis/team/wal/0001";
    bucket.create(wal, payload(4, 10)).await.unwrap();
    bucket.delete(&[wal.to_owned()]).await.unwrap();
    bucket.create("apis/other/snapshot.db", payload(5, 10)).await.unwrap();
    let generations = fake.generations(BUCKET);
    assert_eq!((generations.len(), generations.iter().filter(|o| o.live).count()), (5, 2), "{generations:?}");

    assert_eq!(bucket.destroy().await.unwrap(), 5);
    assert!(!fake.bucket_exists(BUCKET));
    let lists = requests(&fake, &format!("GET /storage/v1/b/{BUCKET}/o?"));
    assert_eq!(lists.len(), 3, "{lists:?}");
    assert!(lists.iter().all(|l| l.contains("versions=true")) && lists[1].contains("pageToken="), "{lists:?}");
    let deletes = requests(&fake, &format!("DELETE /storage/v1/b/{BUCKET}/o/"));
    assert_eq!(deletes.len(), 5 + 1, "the checkpoint's own delete, then one per generation: {deletes:?}");
    assert!(deletes[1..].iter().all(|d| d.contains("?generation=")), "{deletes:?}");
    assert_eq!(requests(&fake, "DELETE").last(), Some(&format!("DELETE /storage/v1/b/{BUCKET}")));

    // Already gone.
    assert_eq!(bucket.destroy().await.unwrap(), 0);
}

#[tokio::test]
async fn a_failed_destroy_can_be_run_again() {
    let fake = FakeGcs::start().await;
    let bucket = gcs_bucket(&fake, BUCKET).await;
    bucket.ensure().await.unwrap();
    bucket.create(KEY, payload(1, 10)).await.unwrap();
    bucket.create("apis/team/wal/0001", payload(2, 10)).await.unwrap();
    // The list fails; then the first delete takes effect but its answer is lost.
    fake.fail_next(1, 503);
    let err = bucket.destroy().await.unwrap_err();
    assert!(matches!(&err, BucketError::Failed(m) if m.contains("503")), "{err:?}");
    fake.lose_next(1);
    assert!(matches!(bucket.destroy().await, Err(BucketError::Failed(_))));
    assert_eq!(fake.generations(BUCKET).len(), 1, "the lost delete took effect");
    assert_eq!(bucket.destroy().await.unwrap(), 1);
    assert!(!fake.bucket_exists(BUCKET));
}

#[tokio::test]
async fn the_fake_patches_lists_and_deletes_buckets_as_the_json_api_does() {
    let fake = FakeGcs::start().await;
    let bearer = Some("Bearer test-token");
    fake.create_bucket(BUCKET);
    let at = format!("/storage/v1/b/{BUCKET}");
    let (status, body) = raw(&fake, "PATCH", &format!("{at}?ifMetagenerationMatch=2"), bearer, "{}");
    assert_eq!(status, 412, "{body}");
    let patch = r#"{"versioning":{"enabled":true},"iamConfiguration":{"publicAccessPrevention":"enforced"}}"#;
    let (status, body) = raw(&fake, "PATCH", &format!("{at}?ifMetagenerationMatch=1"), bearer, patch);
    assert_eq!(status, 200, "{body}");
    let resource: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((resource["kind"].as_str(), resource["metageneration"].as_str()), (Some("storage#bucket"), Some("2")));
    // Merged field by field: the uniform access setting the patch did not name is still there.
    assert_eq!(resource["iamConfiguration"]["uniformBucketLevelAccess"]["enabled"], false);
    assert_eq!(resource["iamConfiguration"]["publicAccessPrevention"], "enforced");

    let (status, body) = raw(&fake, "GET", &format!("{at}/o"), bearer, "");
    assert_eq!(
        (status, serde_json::from_str::<serde_json::Value>(&body).unwrap()),
        (200, json!({"kind": "storage#objects"}))
    );
    fake.put_raw(BUCKET, KEY, payload(1, 10));
    let (status, body) = raw(&fake, "DELETE", &at, bearer, "");
    assert_eq!(status, 409, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], 409);
    let (status, body) = raw(&fake, "DELETE", &format!("{at}/o/apis%2Fteam%2Fsnapshot.db"), bearer, "");
    assert_eq!(status, 204, "{body}");
    let (status, body) = raw(&fake, "GET", &format!("{at}/o?versions=true"), bearer, "");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, page["items"][0]["name"].as_str()), (200, Some(KEY)), "kept as noncurrent: {body}");
    assert!(page["items"][0]["timeDeleted"].is_string(), "{body}");
    let generation = page["items"][0]["generation"].as_str().unwrap();
    let (status, _) =
        raw(&fake, "DELETE", &format!("{at}/o/apis%2Fteam%2Fsnapshot.db?generation={generation}"), bearer, "");
    assert_eq!(status, 204);
    let (status, _) = raw(&fake, "DELETE", &at, bearer, "");
    assert_eq!(status, 204);
    assert!(!fake.bucket_exists(BUCKET));
}
