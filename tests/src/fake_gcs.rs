//! A fake Cloud Storage JSON API, in process, for the tests of the checkpoint's GCS bucket
//! (`anycloud_checkpoint::GcsBucket`): the requests google-cloud-storage sends for single-shot
//! uploads and media downloads, the object delete and list, and the bucket insert, get, patch and
//! delete, answered the way Cloud Storage answers where a client can tell.
//!
//! What it does like the real API:
//! - `POST /upload/storage/v1/b/{bucket}/o?uploadType=multipart&name=..`: a `multipart/related`
//!   body of the JSON metadata, the media and, optionally, the trailing checksums part the crate
//!   sends (`{"crc32c","md5Hash"}`); a CRC32C or MD5 given in the metadata or the trailer must
//!   match the media (400 `invalid` otherwise, nothing written);
//! - every write gives the object a new generation (strictly increasing across the fake, taken
//!   from the microsecond clock as GCS's are) and metageneration 1, and answers the object
//!   resource (`generation`, `size` and `metageneration` as strings, `crc32c` as base64 of the
//!   big-endian CRC32C, `md5Hash`, RFC 3339 times, ...);
//! - `ifGenerationMatch` (`0`: the object must not exist) and `ifGenerationNotMatch` on writes,
//!   reads and deletes: HTTP 412 `conditionNotMet` when they do not hold;
//! - `GET /storage/v1/b/{bucket}/o/{object}?alt=media` (the name percent-encoded, `/` as `%2F`)
//!   answers the bytes with the headers the crate reads: `x-goog-generation`,
//!   `x-goog-metageneration`, `x-goog-hash: crc32c=..,md5=..`, `x-goog-stored-content-length`,
//!   `x-goog-stored-content-encoding`, `x-goog-storage-class`, `etag`; `generation=` and a `Range`
//!   header (what the crate sends to resume a broken download) answer 206 with `content-range`;
//!   without `alt=media` it answers the object resource;
//! - `DELETE /storage/v1/b/{bucket}/o/{object}`: 204, 404 if absent; with `generation=G`, that
//!   generation (live or noncurrent) is deleted for good;
//! - versioning: in a bucket whose `versioning.enabled` is true, a replaced or deleted object's
//!   generation is kept as noncurrent (with `timeDeleted`), and `generation=` reads it; a bucket
//!   without versioning keeps live objects only;
//! - `GET /storage/v1/b/{bucket}/o` (`prefix`, `versions=true` for the noncurrent generations too,
//!   `maxResults`, `pageToken`): a `storage#objects` page of object resources, by name then
//!   generation, `items` absent when empty, `nextPageToken` when more follow (at most
//!   [`FakeGcs::set_list_page_size`] items a page, 1000 as GCS's default);
//! - `POST /storage/v1/b?project=P`, `GET`, `PATCH` and `DELETE /storage/v1/b/{bucket}`: bucket
//!   insert (409 if the name exists, worded for "you own it" or "not available"), get, patch
//!   (`versioning`, `iamConfiguration`, `lifecycle`, `labels`, merged as GCS's patch semantics
//!   merge them: objects field by field, lists whole; a new metageneration;
//!   `ifMetagenerationMatch`), and delete (409 while any generation is left);
//! - `GET` and `PUT /storage/v1/b/{bucket}/iam`: the bucket's IAM policy (a new bucket's is its
//!   project's legacy owner and reader bindings), replaced whole by a `PUT` whose `etag` is the
//!   current one (412 `conditionNotMet` for a stale one, as GCS answers a concurrent change);
//!   the bindings are kept, not enforced (every token may still do everything);
//! - `GET /storage/v1/b?project=P` (`prefix`): the buckets of project P, by name, each with the
//!   `projectNumber` every bucket resource carries (a number derived from the project's id);
//! - a bucket of another project ([`FakeGcs::create_foreign_bucket`]): every call on it is 403
//!   naming the caller (the JWT's issuer) and the permission, and an insert of its name 409; or
//!   one that project opened to everyone ([`FakeGcs::create_bucket_in`]), as a bucket sniper
//!   would: every call on it works, and only its `projectNumber` tells whose it is;
//! - a missing object is 404 "No such object: BUCKET/NAME", a missing bucket 404 "The specified
//!   bucket does not exist.", as GCS words them (a client tells them apart only by the message);
//!   errors in Google's shape (`{"error":{"code","message","errors":[{"message","domain","reason"}]}}`);
//! - every request must carry `Authorization: Bearer <token>` (401 `required` otherwise); the
//!   token is not checked (service-account credentials send a JWT they sign themselves).
//!
//! What it does not: resumable and `media` uploads (501: `GcsBucket` sends every object in one
//! multipart request), listing with a `delimiter` (501), compose, copy, ACLs, customer-supplied
//! encryption, gzip transcoding, soft delete, retention policies, lifecycle actions (rules are
//! stored, never run); projects and IAM are not modelled beyond each bucket's project and foreign
//! buckets (every token may do everything to every other bucket).
//!
//! Corruption, for the tests of integrity checks: [`FakeGcs::put_raw`] and [`FakeGcs::truncate`]
//! change an object's stored bytes but keep what was recorded when it was written (generation,
//! size, CRC32C, MD5), as when bytes go bad at rest or in transit. A download then serves bytes
//! whose hash is not the one in `x-goog-hash`, which a client must catch: recomputing the hash
//! of the planted bytes would make them a valid object, and no client check could fail.
//!
//! Signed URLs (V4, path style: `GET /{bucket}/{object}?X-Goog-Signature=..`): checked as GCS
//! checks them ([`crate::fake_gcs_signed_url`]), against the key of the tests' service account
//! ([`crate::gcp_test_key`]) and the fake's clock ([`FakeGcs::advance_clock`]); a valid one reads
//! the live object's bytes without any bearer token.
//!
//! Knobs for faults: [`FakeGcs::fail_next`] (any status, before acting) and
//! [`FakeGcs::lose_next`] (act on a write or delete, then answer 503: a lost response).
// Errors are the responses themselves; their size does not matter to a test server.
#![allow(clippy::missing_panics_doc, clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

/// An object as the fake stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeObject {
    /// The object's name.
    pub name: String,
    /// Its generation (a write's version).
    pub generation: i64,
    /// The bytes a download serves (after any planted corruption).
    pub bytes: Bytes,
    /// The CRC32C recorded at the write (of the bytes written, not of planted ones).
    pub crc32c: u32,
    /// The size recorded at the write.
    pub size: u64,
    /// Whether this is the live generation (not a noncurrent one kept by versioning).
    pub live: bool,
}

/// The running fake: a server on its own thread and runtime, and its state for inspection.
pub struct FakeGcs {
    addr: SocketAddr,
    state: Arc<Mutex<Fake>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl FakeGcs {
    /// Starts a fake with no buckets on a free port of 127.0.0.1; returns once it serves.
    ///
    /// The server runs on its own thread and runtime (as the fake Compute server does), so it
    /// keeps answering while a test blocks, for instance on a child process that calls it.
    pub async fn start() -> Self {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("binding the fake GCS server");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the fake GCS server's address");
        let state = Arc::new(Mutex::new(Fake::new(format!("http://{addr}"))));
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let (ready, serving) = tokio::sync::oneshot::channel::<()>();
        let app_state = state.clone();
        std::thread::Builder::new()
            .name("fake-gcs".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("the fake GCS server's runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    // Snapshots are uploaded in one request: no body limit.
                    let app = Router::new().fallback(handle).layer(DefaultBodyLimit::disable()).with_state(app_state);
                    let _ = ready.send(());
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = stop.await;
                        })
                        .await;
                });
            })
            .expect("spawning the fake GCS server");
        serving.await.expect("the fake GCS server started");
        Self { addr, state, shutdown: Some(shutdown) }
    }

    /// The endpoint to give the Storage client (`http://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> MutexGuard<'_, Fake> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Creates an empty bucket (as `POST /storage/v1/b` would, in project `anycloud-test`, with
    /// no settings: not versioned); an existing bucket is left as it is.
    pub fn create_bucket(&self, name: &str) {
        let mut fake = self.lock();
        if !fake.buckets.contains_key(name) {
            let resource = bucket_resource(&fake.endpoint, "anycloud-test", name, &json!({}));
            fake.buckets.insert(name.to_owned(), FakeBucket::new(resource, false));
        }
    }

    /// Creates an empty bucket in another project, whose IAM grants the callers of this fake
    /// nothing: every call on it answers 403, and an insert of its name 409 (bucket names are
    /// global). An existing bucket is left as it is.
    pub fn create_foreign_bucket(&self, name: &str) {
        let mut fake = self.lock();
        if !fake.buckets.contains_key(name) {
            let resource = bucket_resource(&fake.endpoint, "someone-else", name, &json!({}));
            fake.buckets.insert(name.to_owned(), FakeBucket::new(resource, true));
        }
    }

    /// Creates an empty bucket in `project`, which every caller of this fake may use (a bucket
    /// sniper's, made under a name someone else will ask for and opened to them). An existing
    /// bucket is left as it is.
    pub fn create_bucket_in(&self, project: &str, name: &str) {
        let mut fake = self.lock();
        if !fake.buckets.contains_key(name) {
            let resource = bucket_resource(&fake.endpoint, project, name, &json!({}));
            fake.buckets.insert(name.to_owned(), FakeBucket::new(resource, false));
        }
    }

    /// The bucket's IAM bindings (`[{"role","members"}]`); `None` if there is no such bucket.
    pub fn bucket_bindings(&self, name: &str) -> Option<Value> {
        self.lock().buckets.get(name).map(|b| b.bindings.clone())
    }

    /// Whether the bucket exists.
    pub fn bucket_exists(&self, name: &str) -> bool {
        self.lock().buckets.contains_key(name)
    }

    /// The bucket's resource (`storage#bucket`, as `GET /storage/v1/b/{bucket}` answers it);
    /// `None` if there is no such bucket.
    pub fn bucket(&self, name: &str) -> Option<Value> {
        self.lock().buckets.get(name).map(|b| b.resource.clone())
    }

    /// The bucket's live objects, by name; empty if there is no such bucket.
    pub fn objects(&self, bucket: &str) -> Vec<FakeObject> {
        self.lock()
            .buckets
            .get(bucket)
            .map_or_else(Vec::new, |b| b.objects.iter().map(|(name, o)| o.fake_object(name, true)).collect())
    }

    /// Every generation the bucket holds, live and noncurrent, by name then generation; empty if
    /// there is no such bucket.
    pub fn generations(&self, bucket: &str) -> Vec<FakeObject> {
        self.lock().buckets.get(bucket).map_or_else(Vec::new, |b| {
            b.generations().into_iter().map(|(name, o, live)| o.fake_object(name, live)).collect()
        })
    }

    /// The most items one page of an object list holds (GCS's default, and the fake's, is 1000;
    /// a request's smaller `maxResults` wins).
    pub fn set_list_page_size(&self, items: usize) {
        self.lock().list_page_size = items.max(1);
    }

    /// Moves the fake's clock `by` ahead, for the signed URLs it checks.
    pub fn advance_clock(&self, by: std::time::Duration) {
        self.lock().clock_offset += by;
    }

    /// Replaces the stored bytes of an object, keeping its recorded generation, size and hashes
    /// (corruption: see the module docs). With no such object, it writes a valid one, with a new
    /// generation and the hashes of `bytes`.
    pub fn put_raw(&self, bucket: &str, key: &str, bytes: impl Into<Bytes>) {
        let bytes = bytes.into();
        let mut fake = self.lock();
        let generation = fake.next_generation();
        let bucket = fake.buckets.get_mut(bucket).expect("put_raw into a bucket that does not exist");
        match bucket.objects.get_mut(key) {
            Some(object) => object.bytes = bytes,
            None => {
                bucket.objects.insert(key.to_owned(), StoredObject::new(bytes, generation, None));
            }
        }
    }

    /// Cuts an object's stored bytes to `len`, keeping what was recorded at its write.
    pub fn truncate(&self, bucket: &str, key: &str, len: usize) {
        let mut fake = self.lock();
        let object = fake
            .buckets
            .get_mut(bucket)
            .and_then(|b| b.objects.get_mut(key))
            .expect("truncate of an object that does not exist");
        object.bytes = object.bytes.slice(..len.min(object.bytes.len()));
    }

    /// Every request: `METHOD /path?query`, in order.
    pub fn requests(&self) -> Vec<String> {
        self.lock().requests.clone()
    }

    /// Answers the next `n` requests with `status` in Google's error shape, without acting on them.
    pub fn fail_next(&self, n: u32, status: u16) {
        self.lock().faults.push(Fault { remaining: n, status, lose: false });
    }

    /// Acts on the next `n` writes and deletes but answers 503, as when a response is lost.
    pub fn lose_next(&self, n: u32) {
        self.lock().faults.push(Fault { remaining: n, status: 503, lose: true });
    }
}

impl Drop for FakeGcs {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl std::fmt::Debug for FakeGcs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeGcs").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// A fault to inject.
struct Fault {
    remaining: u32,
    status: u16,
    /// Act, then answer the error.
    lose: bool,
}

/// Everything the fake holds.
struct Fake {
    endpoint: String,
    buckets: BTreeMap<String, FakeBucket>,
    last_generation: i64,
    requests: Vec<String>,
    faults: Vec<Fault>,
    list_page_size: usize,
    /// Whose signed URLs it accepts.
    signers: crate::fake_gcs_signed_url::Signers,
    /// How far its clock is ahead of the system's (for expired signed URLs without waiting).
    clock_offset: std::time::Duration,
}

struct FakeBucket {
    resource: Value,
    /// The live generation of each object.
    objects: BTreeMap<String, StoredObject>,
    /// Generations replaced or deleted while versioning was on, by name and generation.
    noncurrent: BTreeMap<(String, i64), StoredObject>,
    /// In another project whose IAM grants this fake's callers nothing.
    foreign: bool,
    /// The bucket's IAM bindings (`GET`/`PUT .../iam`), and the count its etag is made of.
    bindings: Value,
    policy_etag: u64,
}

impl FakeBucket {
    fn new(resource: Value, foreign: bool) -> Self {
        // What GCS gives a new bucket: its project's owners and editors own it, its viewers read it.
        let project = resource["projectNumber"].as_str().unwrap_or_default().to_owned();
        let bindings = json!([
            {"role": "roles/storage.legacyBucketOwner",
             "members": [format!("projectEditor:{project}"), format!("projectOwner:{project}")]},
            {"role": "roles/storage.legacyBucketReader", "members": [format!("projectViewer:{project}")]},
        ]);
        Self { resource, objects: BTreeMap::new(), noncurrent: BTreeMap::new(), foreign, bindings, policy_etag: 1 }
    }

    /// The bucket's IAM policy as `GET .../iam` answers it.
    fn policy(&self, name: &str) -> Value {
        json!({
            "kind": "storage#policy",
            "resourceId": format!("projects/_/buckets/{name}"),
            "version": 1,
            "etag": format!("CA{}=", self.policy_etag),
            "bindings": self.bindings,
        })
    }

    fn versioned(&self) -> bool {
        self.resource["versioning"]["enabled"] == true
    }

    /// Ends the live generation of `name` (replaced or deleted): kept as noncurrent if the
    /// bucket is versioned, gone otherwise.
    fn retire(&mut self, name: &str) {
        if let Some(mut object) = self.objects.remove(name)
            && self.versioned()
        {
            object.deleted = Some(SystemTime::now());
            self.noncurrent.insert((name.to_owned(), object.generation), object);
        }
    }

    /// Every generation, live or not, by name then generation, with whether it is live.
    fn generations(&self) -> Vec<(&str, &StoredObject, bool)> {
        let live = self.objects.iter().map(|(name, o)| (name.as_str(), o, true));
        let noncurrent = self.noncurrent.iter().map(|((name, _), o)| (name.as_str(), o, false));
        let mut all: Vec<_> = live.chain(noncurrent).collect();
        all.sort_by_key(|(name, o, _)| (*name, o.generation));
        all
    }
}

struct StoredObject {
    bytes: Bytes,
    generation: i64,
    content_type: String,
    /// What was recorded at the write: corruption changes `bytes` only.
    size: u64,
    crc32c: u32,
    md5: [u8; 16],
    created: SystemTime,
    /// When it stopped being live (noncurrent generations only).
    deleted: Option<SystemTime>,
}

impl StoredObject {
    fn new(bytes: Bytes, generation: i64, content_type: Option<String>) -> Self {
        Self {
            size: bytes.len() as u64,
            crc32c: crc32c::crc32c(&bytes),
            md5: md5::compute(&bytes).0,
            bytes,
            generation,
            content_type: content_type.unwrap_or_else(|| "application/octet-stream".to_owned()),
            created: SystemTime::now(),
            deleted: None,
        }
    }

    fn fake_object(&self, name: &str, live: bool) -> FakeObject {
        FakeObject {
            name: name.to_owned(),
            generation: self.generation,
            bytes: self.bytes.clone(),
            crc32c: self.crc32c,
            size: self.size,
            live,
        }
    }

    fn crc32c_base64(&self) -> String {
        BASE64.encode(self.crc32c.to_be_bytes())
    }

    fn md5_base64(&self) -> String {
        BASE64.encode(self.md5)
    }

    /// GCS's etag of a generation at metageneration 1: base64 of the generation's varint and
    /// `0x10 0x01`; what matters is that it changes with the generation.
    fn etag(&self) -> String {
        let mut bytes = vec![0x08];
        let mut generation = self.generation as u64;
        while generation >= 0x80 {
            bytes.push((generation as u8 & 0x7f) | 0x80);
            generation >>= 7;
        }
        bytes.extend([generation as u8, 0x10, 0x01]);
        BASE64.encode(bytes)
    }

    fn resource(&self, endpoint: &str, bucket: &str, name: &str) -> Value {
        let created = rfc3339(self.created);
        let encoded = percent_encode(name);
        let mut resource = json!({
            "kind": "storage#object",
            "id": format!("{bucket}/{name}/{}", self.generation),
            "selfLink": format!("{endpoint}/storage/v1/b/{bucket}/o/{encoded}"),
            "mediaLink": format!("{endpoint}/download/storage/v1/b/{bucket}/o/{encoded}?generation={}&alt=media", self.generation),
            "name": name,
            "bucket": bucket,
            "generation": self.generation.to_string(),
            "metageneration": "1",
            "contentType": self.content_type,
            "storageClass": "STANDARD",
            "size": self.size.to_string(),
            "md5Hash": self.md5_base64(),
            "crc32c": self.crc32c_base64(),
            "etag": self.etag(),
            "timeCreated": created,
            "updated": created,
            "timeStorageClassUpdated": created,
            "timeFinalized": created,
        });
        if let Some(deleted) = self.deleted {
            resource["timeDeleted"] = json!(rfc3339(deleted));
        }
        resource
    }
}

impl Fake {
    fn new(endpoint: String) -> Self {
        Self {
            endpoint,
            buckets: BTreeMap::new(),
            last_generation: 0,
            requests: Vec::new(),
            faults: Vec::new(),
            list_page_size: 1000,
            signers: {
                let mut signers = crate::fake_gcs_signed_url::Signers::default();
                signers.trust(crate::gcp_test_key::CLIENT_EMAIL, crate::gcp_test_key::TEST_ONLY_PRIVATE_KEY);
                signers
            },
            clock_offset: std::time::Duration::ZERO,
        }
    }

    /// The clock in microseconds, or one more than the last generation if the clock has not moved.
    fn next_generation(&mut self) -> i64 {
        let micros = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_micros()) as i64;
        self.last_generation = micros.max(self.last_generation + 1);
        self.last_generation
    }
}

/// `PUT /storage/v1/b/{bucket}/iam`: the policy's bindings replace the bucket's, when its `etag`
/// (if any) is the bucket's current one; a stale etag is 412, as GCS answers a concurrent change.
/// A binding with a condition needs uniform bucket-level access and `version` 3 (400 otherwise).
fn set_bucket_policy(fake: &mut Fake, bucket: &str, body: &[u8]) -> Response {
    let Ok(policy) = serde_json::from_slice::<Value>(body) else {
        return invalid("Invalid JSON payload received.");
    };
    let Some(stored) = fake.buckets.get_mut(bucket) else { return no_such_bucket() };
    if let Some(etag) = policy["etag"].as_str()
        && etag != format!("CA{}=", stored.policy_etag)
    {
        return condition_not_met();
    }
    let bindings = policy["bindings"].as_array().cloned().unwrap_or_default();
    let conditional = bindings.iter().any(|b| !b["condition"].is_null());
    let uniform = stored.resource["iamConfiguration"]["uniformBucketLevelAccess"]["enabled"] == true;
    if conditional && (policy["version"] != 3 || !uniform) {
        return invalid("Conditions need policy version 3 and uniform bucket-level access.");
    }
    if bindings.iter().any(|b| !b["role"].as_str().is_some_and(|r| r.starts_with("roles/"))) {
        return invalid("Role must be of the form roles/ROLE.");
    }
    stored.bindings = Value::Array(bindings);
    stored.policy_etag += 1;
    ok(stored.policy(bucket))
}

/// A Google API error response.
fn error(status: u16, reason: &str, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    });
    (code, axum::Json(body)).into_response()
}

fn no_such_bucket() -> Response {
    error(404, "notFound", "The specified bucket does not exist.")
}

fn no_such_object(bucket: &str, name: &str) -> Response {
    error(404, "notFound", &format!("No such object: {bucket}/{name}"))
}

fn condition_not_met() -> Response {
    let message = "At least one of the pre-conditions you specified did not hold.";
    let body = json!({
        "error": {
            "code": 412,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": "conditionNotMet",
                        "locationType": "header", "location": "If-Match"}],
        }
    });
    (StatusCode::PRECONDITION_FAILED, axum::Json(body)).into_response()
}

fn invalid(message: &str) -> Response {
    error(400, "invalid", message)
}

fn ok(value: Value) -> Response {
    (StatusCode::OK, axum::Json(value)).into_response()
}

/// A fault's error response.
fn fault_response(status: u16) -> Response {
    match status {
        401 => unauthenticated("Invalid Credentials"),
        403 => error(
            403,
            "forbidden",
            "anycloud-ci@anycloud-test.iam.gserviceaccount.com does not have storage.objects.create access to the Google Cloud Storage object. Permission 'storage.objects.create' denied on resource (or it may not exist).",
        ),
        429 => error(429, "rateLimitExceeded", "The rate of change requests to the object exceeds the rate limit."),
        500 => error(500, "backendError", "We encountered an internal error. Please try again."),
        status => error(status, "backendError", "Backend Error"),
    }
}

fn unauthenticated(message: &str) -> Response {
    let body = json!({"error": {
        "code": 401,
        "message": message,
        "errors": [{"message": message, "domain": "global", "reason": "required",
                    "locationType": "header", "location": "Authorization"}],
    }});
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

/// The IAM permission a call on an existing bucket or its objects needs; `None` for other paths.
fn permission(method: &Method, segments: &[&str]) -> Option<&'static str> {
    let in_bucket = match segments {
        ["upload", "storage", "v1", "b", _, "o"] => return Some("storage.objects.create"),
        ["storage", "v1", "b", _, rest @ ..] => rest,
        _ => return None,
    };
    Some(match (in_bucket, method.as_str()) {
        ([], "GET") => "storage.buckets.get",
        ([], "PATCH") => "storage.buckets.update",
        ([], "DELETE") => "storage.buckets.delete",
        (["iam"], "GET") => "storage.buckets.getIamPolicy",
        (["iam"], _) => "storage.buckets.setIamPolicy",
        (["o"], "GET") => "storage.objects.list",
        (["o", _], "DELETE") => "storage.objects.delete",
        (["o", _], _) => "storage.objects.get",
        _ => return None,
    })
}

/// GCS's 403 for a caller without `permission` on a bucket or its objects.
fn forbidden(caller: &str, permission: &str) -> Response {
    let resource = if permission.starts_with("storage.buckets.") { "bucket" } else { "object" };
    error(
        403,
        "forbidden",
        &format!(
            "{caller} does not have {permission} access to the Google Cloud Storage {resource}. Permission \
             '{permission}' denied on resource (or it may not exist)."
        ),
    )
}

/// Who a request runs as: the issuer of its bearer JWT (a service account's email), as GCS
/// names the caller in a 403.
fn caller(headers: &HeaderMap) -> String {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let claims = token
        .split('.')
        .nth(1)
        .and_then(|claims| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(claims).ok())
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    claims.and_then(|c| c["iss"].as_str().map(str::to_owned)).unwrap_or_else(|| "The caller".to_owned())
}

/// The single handler: routes by path, after authentication and fault injection.
async fn handle(
    State(state): State<Arc<Mutex<Fake>>>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut fake = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let path = uri.path().to_owned();
    fake.requests.push(format!("{method} {}", uri.path_and_query().map_or(path.as_str(), |p| p.as_str())));
    if crate::fake_gcs_signed_url::is_signed(&query) {
        return signed_read(&fake, &method, &uri, &headers);
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|token| !token.trim().is_empty());
    if !bearer {
        return unauthenticated("Anonymous caller does not have storage access. Login Required.");
    }
    let mutating = method == Method::POST || method == Method::PATCH || method == Method::DELETE;
    let mut lose = false;
    if let Some(fault) = fake.faults.iter_mut().find(|f| f.remaining > 0 && (mutating || !f.lose)) {
        fault.remaining -= 1;
        let (status, lost) = (fault.status, fault.lose);
        fake.faults.retain(|f| f.remaining > 0);
        if !lost {
            return fault_response(status);
        }
        lose = true;
    }
    let Some(segments) = path.strip_prefix('/').map(|p| p.split('/').map(percent_decode).collect::<Option<Vec<_>>>())
    else {
        return error(404, "notFound", "Not Found");
    };
    let Some(segments) = segments else {
        return invalid("Invalid percent-encoding in the request path.");
    };
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    if let Some(permission) = permission(&method, &segments)
        && let ["upload", "storage", "v1", "b", bucket, ..] | ["storage", "v1", "b", bucket, ..] = segments.as_slice()
        && fake.buckets.get(*bucket).is_some_and(|b| b.foreign)
    {
        return forbidden(&caller(&headers), permission);
    }
    let get = method == Method::GET;
    let post = method == Method::POST;
    let patch = method == Method::PATCH;
    let delete = method == Method::DELETE;
    let response = match segments.as_slice() {
        ["upload", "storage", "v1", "b", bucket, "o"] if post => upload(&mut fake, bucket, &query, &headers, &body),
        ["storage", "v1", "b", bucket, "o"] if get => list_objects(&fake, bucket, &query),
        ["storage", "v1", "b", bucket, "o", name] if get => read(&fake, bucket, name, &query, &headers),
        ["storage", "v1", "b", bucket, "o", name] if delete => delete_object(&mut fake, bucket, name, &query),
        ["storage", "v1", "b"] if post => insert_bucket(&mut fake, &query, &body),
        ["storage", "v1", "b"] if get => list_buckets(&fake, &query),
        ["storage", "v1", "b", bucket] if get => match fake.buckets.get(*bucket) {
            Some(b) => ok(b.resource.clone()),
            None => no_such_bucket(),
        },
        ["storage", "v1", "b", bucket] if patch => patch_bucket(&mut fake, bucket, &query, &body),
        ["storage", "v1", "b", bucket] if delete => delete_bucket(&mut fake, bucket),
        ["storage", "v1", "b", bucket, "iam"] if get => match fake.buckets.get(*bucket) {
            Some(b) => ok(b.policy(bucket)),
            None => no_such_bucket(),
        },
        ["storage", "v1", "b", bucket, "iam"] if method == Method::PUT => set_bucket_policy(&mut fake, bucket, &body),
        _ => error(404, "notFound", "Not Found"),
    };
    if lose && response.status().is_success() {
        return fault_response(503);
    }
    response
}

/// A request through a signed URL: checked, then the live object's bytes (path style,
/// `/{bucket}/{object}`); a signed URL reads, nothing else.
fn signed_read(fake: &Fake, method: &Method, uri: &Uri, headers: &HeaderMap) -> Response {
    let now = SystemTime::now() + fake.clock_offset;
    let raw_query = uri.query().unwrap_or_default();
    if let Err(refused) = crate::fake_gcs_signed_url::check(&fake.signers, method, uri.path(), raw_query, headers, now)
    {
        return refused;
    }
    if method != Method::GET {
        return crate::fake_gcs_signed_url::xml(405, "MethodNotAllowed", "The fake serves signed GETs only.");
    }
    let path = uri.path().strip_prefix('/').unwrap_or_default();
    let (bucket, name) = path.split_once('/').unwrap_or((path, ""));
    let (Some(bucket), Some(name)) = (percent_decode(bucket), percent_decode(name)) else {
        return crate::fake_gcs_signed_url::xml(400, "InvalidArgument", "Invalid percent-encoding.");
    };
    match fake.buckets.get(&bucket).and_then(|b| b.objects.get(&name)) {
        Some(object) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, "application/octet-stream")], object.bytes.clone()).into_response()
        }
        None => crate::fake_gcs_signed_url::xml(404, "NoSuchKey", "The specified key does not exist."),
    }
}

/// `ifGenerationMatch` / `ifGenerationNotMatch` against the current generation (`None`: no
/// object). `Err` is the response to give.
fn check_generation(query: &HashMap<String, String>, current: Option<i64>) -> Result<(), Response> {
    for (param, must_match) in [("ifGenerationMatch", true), ("ifGenerationNotMatch", false)] {
        let Some(value) = query.get(param) else { continue };
        let Ok(wanted) = value.parse::<i64>() else {
            return Err(invalid(&format!("Invalid argument for {param}: '{value}'")));
        };
        let matches = current.unwrap_or(0) == wanted;
        if matches != must_match {
            return Err(condition_not_met());
        }
    }
    Ok(())
}

fn upload(
    fake: &mut Fake,
    bucket: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    match query.get("uploadType").map(String::as_str) {
        Some("multipart") => {}
        Some(other) => {
            return error(
                501,
                "notImplemented",
                &format!("The fake serves uploadType=multipart only, not uploadType={other}."),
            );
        }
        None => return error(400, "required", "Required parameter: uploadType"),
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let parts = match multipart_related(content_type, body) {
        Ok(parts) => parts,
        Err(message) => return error(400, "badContent", &message),
    };
    let [metadata, media, trailer @ ..] = parts.as_slice() else {
        return error(400, "badContent", "A multipart upload needs a metadata part and a media part.");
    };
    let Ok(metadata) = serde_json::from_slice::<Value>(&metadata.body) else {
        return error(400, "parseError", "Parse Error");
    };
    let trailer = match trailer {
        [] => Value::Null,
        [part] => match serde_json::from_slice::<Value>(&part.body) {
            Ok(trailer) => trailer,
            Err(_) => return error(400, "parseError", "Parse Error"),
        },
        _ => return error(400, "badContent", "Too many parts in the multipart upload."),
    };
    let Some(name) = query.get("name").cloned().or_else(|| metadata["name"].as_str().map(str::to_owned)) else {
        return error(400, "required", "Required");
    };
    if name.is_empty() || name.len() > 1024 || name.contains(['\r', '\n']) {
        return invalid(&format!("The object name '{name}' is invalid."));
    }
    let Some(stored) = fake.buckets.get(bucket) else {
        return no_such_bucket();
    };
    if let Err(response) = check_generation(query, stored.objects.get(&name).map(|o| o.generation)) {
        return response;
    }
    let content_type =
        metadata["contentType"].as_str().map(str::to_owned).or_else(|| media.header("content-type").map(str::to_owned));
    let generation = fake.next_generation();
    let object = StoredObject::new(media.body.clone(), generation, content_type);
    for source in [&metadata, &trailer] {
        if let Some(given) = source["crc32c"].as_str()
            && given != object.crc32c_base64()
        {
            return invalid(&format!(
                "Provided CRC32C \"{given}\" doesn't match calculated CRC32C \"{}\".",
                object.crc32c_base64()
            ));
        }
        if let Some(given) = source["md5Hash"].as_str()
            && given != object.md5_base64()
        {
            return invalid(&format!(
                "Provided MD5 hash \"{given}\" doesn't match calculated MD5 hash \"{}\".",
                object.md5_base64()
            ));
        }
    }
    let endpoint = fake.endpoint.clone();
    let resource = object.resource(&endpoint, bucket, &name);
    if let Some(stored) = fake.buckets.get_mut(bucket) {
        stored.retire(&name);
        stored.objects.insert(name, object);
    }
    ok(resource)
}

fn read(fake: &Fake, bucket: &str, name: &str, query: &HashMap<String, String>, headers: &HeaderMap) -> Response {
    let Some(stored) = fake.buckets.get(bucket) else {
        return no_such_bucket();
    };
    let object = match query_generation(query) {
        Ok(None) => stored.objects.get(name),
        // The live generation, or one versioning kept.
        Ok(Some(wanted)) => stored
            .objects
            .get(name)
            .filter(|o| o.generation == wanted)
            .or_else(|| stored.noncurrent.get(&(name.to_owned(), wanted))),
        Err(response) => return response,
    };
    let Some(object) = object else {
        return no_such_object(bucket, name);
    };
    if let Err(response) = check_generation(query, Some(object.generation)) {
        return response;
    }
    if query.get("alt").map(String::as_str) != Some("media") {
        return ok(object.resource(&fake.endpoint, bucket, name));
    }
    let total = object.bytes.len();
    let range = match headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        None => None,
        Some(range) => match byte_range(range, total) {
            Some(range) => Some(range),
            None => {
                let mut response = error(416, "requestedRangeNotSatisfiable", "Request range not satisfiable");
                response.headers_mut().insert(
                    header::CONTENT_RANGE,
                    HeaderValue::from_str(&format!("bytes */{total}")).expect("a header value"),
                );
                return response;
            }
        },
    };
    let (status, bytes) = match &range {
        Some((start, end)) => (StatusCode::PARTIAL_CONTENT, object.bytes.slice(*start..=*end)),
        None => (StatusCode::OK, object.bytes.clone()),
    };
    let mut response = (status, bytes).into_response();
    let values = [
        ("content-type", object.content_type.clone()),
        ("x-goog-generation", object.generation.to_string()),
        ("x-goog-metageneration", "1".to_owned()),
        ("x-goog-stored-content-length", object.size.to_string()),
        ("x-goog-stored-content-encoding", "identity".to_owned()),
        ("x-goog-storage-class", "STANDARD".to_owned()),
        ("x-goog-hash", format!("crc32c={},md5={}", object.crc32c_base64(), object.md5_base64())),
        ("etag", object.etag()),
        ("accept-ranges", "bytes".to_owned()),
    ];
    for (name, value) in values {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    if let Some((start, end)) = range {
        response.headers_mut().insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes {start}-{end}/{total}")).expect("a header value"),
        );
    }
    response
}

/// `bytes=A-B`, `bytes=A-` or `bytes=-N` as an inclusive range of a `total`-byte body.
fn byte_range(range: &str, total: usize) -> Option<(usize, usize)> {
    let (start, end) = range.strip_prefix("bytes=")?.split_once('-')?;
    let (start, end) = match (start.parse::<usize>().ok(), end.parse::<usize>().ok()) {
        (Some(start), Some(end)) => (start, end.min(total.checked_sub(1)?)),
        (Some(start), None) if end.is_empty() => (start, total.checked_sub(1)?),
        (None, Some(suffix)) if start.is_empty() && suffix > 0 => (total.saturating_sub(suffix), total.checked_sub(1)?),
        _ => return None,
    };
    (start <= end).then_some((start, end))
}

/// Without `generation=`, ends the live generation (kept as noncurrent in a versioned bucket);
/// with it, deletes that generation, live or noncurrent, for good.
fn delete_object(fake: &mut Fake, bucket: &str, name: &str, query: &HashMap<String, String>) -> Response {
    let Some(stored) = fake.buckets.get_mut(bucket) else {
        return no_such_bucket();
    };
    let live = stored.objects.get(name).map(|o| o.generation);
    let target = match query_generation(query) {
        Ok(None) => live,
        Ok(Some(wanted)) if live == Some(wanted) || stored.noncurrent.contains_key(&(name.to_owned(), wanted)) => {
            Some(wanted)
        }
        Ok(Some(_)) => None,
        Err(response) => return response,
    };
    let Some(target) = target else {
        return no_such_object(bucket, name);
    };
    if let Err(response) = check_generation(query, Some(target)) {
        return response;
    }
    if query.contains_key("generation") {
        if live == Some(target) {
            stored.objects.remove(name);
        } else {
            stored.noncurrent.remove(&(name.to_owned(), target));
        }
    } else {
        stored.retire(name);
    }
    StatusCode::NO_CONTENT.into_response()
}

/// The `generation=` of a request, if any; `Err` is the response to a malformed one.
fn query_generation(query: &HashMap<String, String>) -> Result<Option<i64>, Response> {
    match query.get("generation").map(|g| g.parse::<i64>()) {
        None => Ok(None),
        Some(Ok(generation)) => Ok(Some(generation)),
        Some(Err(_)) => Err(invalid("Invalid argument for generation")),
    }
}

/// `GET /storage/v1/b/{bucket}/o`: one page of object resources, by name then generation.
fn list_objects(fake: &Fake, bucket: &str, query: &HashMap<String, String>) -> Response {
    let Some(stored) = fake.buckets.get(bucket) else {
        return no_such_bucket();
    };
    if query.contains_key("delimiter") {
        return error(501, "notImplemented", "The fake does not list with a delimiter.");
    }
    let versions = query.get("versions").is_some_and(|v| v == "true");
    let prefix = query.get("prefix").map_or("", String::as_str);
    let page_size = match query.get("maxResults").map(|m| m.parse::<usize>()) {
        None => fake.list_page_size,
        Some(Ok(max)) if max > 0 => max.min(fake.list_page_size),
        Some(_) => return invalid("Invalid argument for maxResults"),
    };
    // GCS's tokens are opaque; this one is where the last page stopped, as `name/generation`.
    let after = match query.get("pageToken").filter(|t| !t.is_empty()) {
        None => None,
        Some(token) => match page_token_position(token) {
            Some(position) => Some(position),
            None => return invalid("Invalid page token."),
        },
    };
    let mut listed = stored
        .generations()
        .into_iter()
        .filter(|(name, _, live)| (versions || *live) && name.starts_with(prefix))
        .filter(|(name, o, _)| after.as_ref().is_none_or(|(n, g)| (*name, o.generation) > (n.as_str(), *g)));
    let page: Vec<_> = listed.by_ref().take(page_size).collect();
    let mut body = json!({"kind": "storage#objects"});
    if listed.next().is_some()
        && let Some((name, o, _)) = page.last()
    {
        body["nextPageToken"] = json!(BASE64.encode(format!("{}/{name}", o.generation)));
    }
    if !page.is_empty() {
        body["items"] = page.iter().map(|(name, o, _)| o.resource(&fake.endpoint, bucket, name)).collect();
    }
    ok(body)
}

/// Where a page token says the last page stopped: the last name and generation listed.
fn page_token_position(token: &str) -> Option<(String, i64)> {
    let text = String::from_utf8(BASE64.decode(token).ok()?).ok()?;
    let (generation, name) = text.split_once('/')?;
    Some((name.to_owned(), generation.parse().ok()?))
}

/// `GET /storage/v1/b?project=P`: the project's buckets whose names start with `prefix`, by name
/// (one page: the fake holds few).
fn list_buckets(fake: &Fake, query: &HashMap<String, String>) -> Response {
    let Some(project) = query.get("project").filter(|p| !p.is_empty()) else {
        return error(400, "required", "Required parameter: project");
    };
    let number = project_number(project).to_string();
    let prefix = query.get("prefix").map_or("", String::as_str);
    let items: Vec<Value> = fake
        .buckets
        .iter()
        .filter(|(name, b)| name.starts_with(prefix) && b.resource["projectNumber"].as_str() == Some(number.as_str()))
        .map(|(_, b)| b.resource.clone())
        .collect();
    let mut body = json!({"kind": "storage#buckets"});
    if !items.is_empty() {
        body["items"] = Value::Array(items);
    }
    ok(body)
}

fn insert_bucket(fake: &mut Fake, query: &HashMap<String, String>, body: &Bytes) -> Response {
    let Some(project) = query.get("project").filter(|p| !p.is_empty()) else {
        return error(400, "required", "Required parameter: project");
    };
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return error(400, "parseError", "Parse Error");
    };
    let name = body["name"].as_str().unwrap_or_default();
    if !valid_bucket_name(name) {
        return invalid(&format!("Invalid bucket name: '{name}'"));
    }
    match fake.buckets.get(name) {
        Some(existing) if existing.foreign => {
            return error(
                409,
                "conflict",
                "The requested bucket name is not available. The bucket namespace is shared by all users of the \
                 system. Please select a different name and try again.",
            );
        }
        Some(_) => {
            return error(
                409,
                "conflict",
                "Your previous request to create the named bucket succeeded and you already own it.",
            );
        }
        None => {}
    }
    let resource = bucket_resource(&fake.endpoint, project, name, &body);
    fake.buckets.insert(name.to_owned(), FakeBucket::new(resource.clone(), false));
    ok(resource)
}

/// The bucket fields a patch may change (the fake's share of them).
const PATCHABLE: [&str; 4] = ["versioning", "iamConfiguration", "labels", "lifecycle"];

/// `PATCH /storage/v1/b/{bucket}`: the given settings merged in, a new metageneration.
fn patch_bucket(fake: &mut Fake, bucket: &str, query: &HashMap<String, String>, body: &Bytes) -> Response {
    let Some(stored) = fake.buckets.get_mut(bucket) else {
        return no_such_bucket();
    };
    let metageneration = stored.resource["metageneration"].as_str().and_then(|m| m.parse::<u64>().ok()).unwrap_or(1);
    if let Some(wanted) = query.get("ifMetagenerationMatch") {
        match wanted.parse::<u64>() {
            Ok(wanted) if wanted == metageneration => {}
            Ok(_) => return condition_not_met(),
            Err(_) => return invalid(&format!("Invalid argument for ifMetagenerationMatch: '{wanted}'")),
        }
    }
    let Ok(patch) = serde_json::from_slice::<Value>(body) else {
        return error(400, "parseError", "Parse Error");
    };
    for field in PATCHABLE {
        if let Some(value) = patch.get(field) {
            merge(&mut stored.resource[field], value);
        }
    }
    mirror_bucket_policy_only(&mut stored.resource);
    let metageneration = metageneration + 1;
    stored.resource["metageneration"] = json!(metageneration.to_string());
    stored.resource["etag"] = json!(bucket_etag(metageneration));
    stored.resource["updated"] = json!(rfc3339(SystemTime::now()));
    ok(stored.resource.clone())
}

/// `DELETE /storage/v1/b/{bucket}`: only an empty bucket (no generation left, live or not).
fn delete_bucket(fake: &mut Fake, bucket: &str) -> Response {
    let Some(stored) = fake.buckets.get(bucket) else {
        return no_such_bucket();
    };
    if !stored.objects.is_empty() || !stored.noncurrent.is_empty() {
        return error(409, "conflict", "The bucket you tried to delete is not empty.");
    }
    fake.buckets.remove(bucket);
    StatusCode::NO_CONTENT.into_response()
}

/// Google's patch semantics: an object is merged field by field (`null` removes one), anything
/// else (a list included) replaces what was there.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// `bucketPolicyOnly` is the old name of `uniformBucketLevelAccess`: GCS answers both, alike.
fn mirror_bucket_policy_only(resource: &mut Value) {
    let uniform = resource["iamConfiguration"]["uniformBucketLevelAccess"].clone();
    if !uniform.is_null() {
        resource["iamConfiguration"]["bucketPolicyOnly"] = uniform;
    }
}

/// A bucket's etag at a metageneration: base64 of the metageneration's varint after `0x08`.
fn bucket_etag(metageneration: u64) -> String {
    let mut bytes = vec![0x08];
    let mut rest = metageneration;
    while rest >= 0x80 {
        bytes.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    bytes.push(rest as u8);
    BASE64.encode(bytes)
}

/// The number of project `project`: a hash of its id, as stable as a real project's number.
pub fn project_number(project: &str) -> u64 {
    project.bytes().fold(0_u64, |n, b| n.wrapping_mul(31).wrapping_add(u64::from(b))) % 1_000_000_000_000
}

fn bucket_resource(endpoint: &str, project: &str, name: &str, body: &Value) -> Value {
    let created = rfc3339(SystemTime::now());
    let project_number = project_number(project);
    let mut resource = json!({
        "kind": "storage#bucket",
        "selfLink": format!("{endpoint}/storage/v1/b/{name}"),
        "id": name,
        "name": name,
        "projectNumber": project_number.to_string(),
        "metageneration": "1",
        "location": body["location"].as_str().unwrap_or("US"),
        "storageClass": body["storageClass"].as_str().unwrap_or("STANDARD"),
        "etag": bucket_etag(1),
        "timeCreated": created,
        "updated": created,
        "iamConfiguration": {
            "bucketPolicyOnly": {"enabled": false},
            "uniformBucketLevelAccess": {"enabled": false},
            "publicAccessPrevention": "inherited",
        },
        "locationType": "multi-region",
    });
    for field in PATCHABLE {
        if let Some(value) = body.get(field) {
            merge(&mut resource[field], value);
        }
    }
    mirror_bucket_policy_only(&mut resource);
    resource
}

/// 3 to 63 lowercase letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit.
fn valid_bucket_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// One part of a multipart body.
struct Part {
    /// Header names lowercased.
    headers: Vec<(String, String)>,
    body: Bytes,
}

impl Part {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Splits a `multipart/related; boundary=..` body (RFC 2046) into its parts.
fn multipart_related(content_type: &str, body: &Bytes) -> Result<Vec<Part>, String> {
    let mut params = content_type.split(';').map(str::trim);
    if !params.next().is_some_and(|kind| kind.eq_ignore_ascii_case("multipart/related")) {
        return Err(format!("Content-Type `{content_type}` is not multipart/related."));
    }
    let boundary = params
        .find_map(|p| p.strip_prefix("boundary="))
        .map(|b| b.trim_matches('"'))
        .filter(|b| !b.is_empty())
        .ok_or("multipart/related without a boundary")?;
    let delimiter = format!("--{boundary}");
    let mut at = find(body, delimiter.as_bytes(), 0).ok_or("no multipart boundary in the body")? + delimiter.len();
    let mut parts = Vec::new();
    loop {
        if body[at..].starts_with(b"--") {
            return Ok(parts);
        }
        at +=
            if body[at..].starts_with(b"\r\n") { 2 } else { return Err("a malformed multipart boundary line".into()) };
        let next = find(body, format!("\r\n{delimiter}").as_bytes(), at).ok_or("an unterminated multipart part")?;
        let part = body.slice(at..next);
        // Headers end at an empty line; a part without headers starts with it.
        let split = if part.starts_with(b"\r\n") {
            (0, 2)
        } else {
            find(&part, b"\r\n\r\n", 0).map(|i| (i, i + 4)).ok_or("a multipart part without a blank line")?
        };
        let head = std::str::from_utf8(&part[..split.0]).map_err(|_| "a multipart part's headers are not UTF-8")?;
        let headers = head
            .split("\r\n")
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        parts.push(Part { headers, body: part.slice(split.1..) });
        at = next + 2 + delimiter.len();
    }
}

/// The first position of `needle` in `haystack` at or after `from`.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let first = *needle.first()?;
    let mut at = from;
    while at + needle.len() <= haystack.len() {
        let candidate = at + haystack[at..].iter().position(|b| *b == first)?;
        if haystack.get(candidate..candidate + needle.len())? == needle {
            return Some(candidate);
        }
        at = candidate + 1;
    }
    None
}

/// Decodes `%XX` escapes of a path segment; `None` if they are malformed or not UTF-8.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Percent-encodes all but RFC 3986's unreserved characters (`/` becomes `%2F`).
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// RFC 3339 in UTC, as Cloud Storage writes its times.
fn rfc3339(time: SystemTime) -> String {
    crate::rfc3339::at_offset(time, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_bodies_split_into_their_parts() {
        let body = Bytes::from_static(
            b"--xyz\r\nContent-Type: application/json\r\n\r\n{\"name\":\"a\"}\r\n--xyz\r\n\r\nbin\r\n--x\r\n--xyz--\r\n",
        );
        let parts = multipart_related("multipart/related; boundary=\"xyz\"", &body).expect("parses");
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].header("content-type"), Some("application/json"));
        assert_eq!(&parts[0].body[..], b"{\"name\":\"a\"}");
        assert_eq!(&parts[1].body[..], b"bin\r\n--x");
        assert!(multipart_related("application/json", &body).is_err());
    }

    #[test]
    fn ranges_paths_and_times() {
        assert_eq!(byte_range("bytes=2-", 10), Some((2, 9)));
        assert_eq!(byte_range("bytes=2-4", 10), Some((2, 4)));
        assert_eq!(byte_range("bytes=-3", 10), Some((7, 9)));
        assert_eq!(byte_range("bytes=10-", 10), None);
        assert_eq!(percent_decode("apis%2Fteam%20a").as_deref(), Some("apis/team a"));
        assert_eq!(percent_encode("apis/team a"), "apis%2Fteam%20a");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn preconditions() {
        let query = |k: &str, v: &str| HashMap::from([(k.to_owned(), v.to_owned())]);
        assert!(check_generation(&query("ifGenerationMatch", "0"), None).is_ok());
        assert!(check_generation(&query("ifGenerationMatch", "0"), Some(5)).is_err());
        assert!(check_generation(&query("ifGenerationMatch", "5"), Some(5)).is_ok());
        assert!(check_generation(&query("ifGenerationMatch", "5"), None).is_err());
        assert!(check_generation(&query("ifGenerationNotMatch", "5"), Some(5)).is_err());
        assert!(check_generation(&query("ifGenerationNotMatch", "5"), Some(6)).is_ok());
    }
}
