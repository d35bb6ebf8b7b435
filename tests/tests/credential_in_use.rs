//! A credential that holds a live cluster's capacity cannot be deleted (without it nobody could
//! remove the cluster's VMs), and the check cannot be raced.
//!
//! - End to end, through the real binary and a hosted API on SQLite: `credentials delete` is
//!   refused (`CREDENTIAL_IN_USE`, exit 3, naming the cluster and `anycloud cluster delete k`)
//!   while the cluster is ready and again while its delete runs (each call to the account takes
//!   1 s, so the delete is still running when asked); the cluster's delete then leaves nothing at
//!   the provider (the simulated cloud's own tables, read from the API's database file), and
//!   only then does the credential's delete go through.
//! - The race, at the database level, on SQLite and on PostgreSQL: a credential delete holds the
//!   credential's row (`Hold::Exclusive`: PostgreSQL `FOR UPDATE`; SQLite's single writer) in the
//!   transaction that checks for clusters and deletes, and a cluster create holds it
//!   (`Hold::Shared`: `FOR SHARE`) in the transaction that inserts the cluster. Whichever commits
//!   first, the other waits for it and sees it: a create that waited on a delete finds the
//!   credential gone, and a delete that waited on a create finds its cluster. On PostgreSQL two
//!   creates on the same credential do not wait for each other.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use anycloud_engine::Store;
use anycloud_tests::e2e::{self, Api, PgDatabase};
use anycloud_workflows::cloud::ProviderKind;
use anycloud_workflows::db::Db;
use anycloud_workflows::db::clusters::{self, Cluster};
use anycloud_workflows::db::credentials::{self, Hold, NewRecord, PublicPart};
use anycloud_workflows::secrets::SecretBox;

/// How long a transaction that must wait is watched before the test lets the other commit.
const WAITS: Duration = Duration::from_millis(300);

/// `credentials delete cap` (plainly and with `--json`): refused because cluster `k` uses it.
#[track_caller]
fn delete_is_refused(api: &Api) {
    let out = api.cli(&["credentials", "delete", "cap"]);
    out.expect_code(3);
    assert!(out.stderr.starts_with("error[CREDENTIAL_IN_USE]: "), "{out}");
    for words in
        ["credential `cap` holds the capacity or the control plane of 1 cluster(s): k", "`anycloud cluster delete k`"]
    {
        assert!(out.stderr.contains(words), "stderr lacks {words:?}\n{out}");
    }
    assert!(out.stdout.is_empty(), "{out}");
    let out = api.cli(&["--json", "credentials", "delete", "cap"]);
    out.expect_code(3);
    let error = out.json_error();
    assert_eq!(error["error"]["code"], "CREDENTIAL_IN_USE", "{out}");
    assert!(error["error"]["message"].as_str().unwrap().contains("anycloud cluster delete k"), "{out}");
    assert_eq!(api.credential("cap")["status"], "valid");
}

/// The phase of cluster `k`, as `cluster status --json` shows it.
fn phase(api: &Api) -> String {
    let out = api.cli(&["--json", "cluster", "status", "k"]);
    out.expect_code(0);
    out.json()["cluster"]["phase"].as_str().unwrap().to_owned()
}

#[test]
fn a_credential_holding_a_cluster_is_not_deleted_until_the_cluster_is_gone() {
    let started = Instant::now();
    let api = Api::start_hosted("credential-in-use");
    api.cli(&["credentials", "new", "cap", "--provider", "sim", "--sim-latency-ms", "1000", "--wait"]).expect_code(0);
    let mut create = e2e::sim_cluster_create("k", "cap", "1");
    create.push("--wait");
    api.spawn_cli(&create).wait(Duration::from_secs(90)).expect_code(0);
    assert_eq!(phase(&api), "ready");
    let live = api.query_strings("SELECT id FROM sim_vms WHERE terminated_at IS NULL");
    assert_eq!(live.len(), 2, "a control plane and one worker: {live:?}");
    eprintln!("cluster ready after {:?}", started.elapsed());

    delete_is_refused(&api);
    assert_eq!(phase(&api), "ready");

    // While the cluster's delete runs, its VMs still need the credential.
    api.cli(&["cluster", "delete", "k"]).expect_code(0);
    delete_is_refused(&api);
    let during = phase(&api);
    assert!(during == "ready" || during == "deleting", "the delete ended too soon for this check: {during}");

    api.spawn_cli(&["wait", "cluster/k"]).wait(Duration::from_secs(90)).expect_code(0);
    assert_eq!(phase(&api), "deleted");
    let live = api.query_strings("SELECT id FROM sim_vms WHERE terminated_at IS NULL");
    assert!(live.is_empty(), "the provider still holds live VMs: {live:?}");
    let networks = api.query_strings("SELECT id FROM sim_networks WHERE deleted_at IS NULL");
    assert!(networks.is_empty(), "the provider still holds network rules: {networks:?}");

    let deleted = api.cli(&["credentials", "delete", "cap"]);
    deleted.expect_code(0);
    assert!(deleted.stdout.contains("credential cap deleted"), "{deleted}");
    assert!(api.credentials().is_empty());
    eprintln!("whole test: {:?}", started.elapsed());
}

/// A valid-looking sim credential, stored as `credentials new` stores it.
async fn add_credential(db: &Db, sealer: &SecretBox, name: &str) {
    let record = NewRecord {
        name: name.into(),
        provider: ProviderKind::Sim,
        public: PublicPart { identity: format!("sim-account-{name}"), ..PublicPart::default() },
        secret: "sim-token".into(),
    };
    let mut tx = db.begin().await.unwrap();
    credentials::insert_in(&mut tx, &record, sealer, "verify-run", anycloud_workflows::now_ms()).await.unwrap();
    tx.commit().await.unwrap();
}

/// A new cluster record on `credential`, as `cluster create` inserts it.
fn cluster(name: &str, credential: &str) -> Cluster {
    Cluster { workflow_id: Some("create-run".into()), ..e2e::cluster_record(name, credential) }
}

/// The live clusters on `credential`, read in a transaction of its own.
async fn live_on(db: &Db, credential: &str) -> Vec<String> {
    let mut tx = db.begin().await.unwrap();
    clusters::live_on_credential_in(&mut tx, credential).await.unwrap()
}

/// Whether `credential` is stored.
async fn stored(db: &Db, credential: &str) -> bool {
    credentials::get(db, credential).await.unwrap().is_some()
}

/// A delete holds the credential; a create started meanwhile waits, then finds it gone.
async fn delete_first_then_create(db: &Db, sealer: &SecretBox) {
    add_credential(db, sealer, "gone").await;
    let mut delete = db.begin().await.unwrap();
    assert!(credentials::hold_in(&mut delete, "gone", Hold::Exclusive).await.unwrap().is_some());
    assert!(clusters::live_on_credential_in(&mut delete, "gone").await.unwrap().is_empty());

    let racing = db.clone();
    let create = tokio::spawn(async move {
        let mut tx = racing.begin().await.unwrap();
        let held = credentials::hold_in(&mut tx, "gone", Hold::Shared).await.unwrap();
        if held.is_some() {
            clusters::insert_in(&mut tx, &cluster("orphan", "gone")).await.unwrap();
            tx.commit().await.unwrap();
        }
        held.map(|credential| credential.name)
    });
    tokio::time::sleep(WAITS).await;
    assert!(!create.is_finished(), "the create must wait for the delete's transaction");
    credentials::delete_in(&mut delete, "gone").await.unwrap();
    delete.commit().await.unwrap();

    let held = create.await.unwrap();
    assert_eq!(held, None, "the create that waited should find the credential gone");
    assert!(!stored(db, "gone").await);
    assert!(live_on(db, "gone").await.is_empty(), "a cluster was created on a deleted credential");
}

/// A create holds the credential and inserts its cluster; a delete started meanwhile waits, then
/// sees the cluster and deletes nothing.
async fn create_first_then_delete(db: &Db, sealer: &SecretBox) {
    add_credential(db, sealer, "busy").await;
    let mut create = db.begin().await.unwrap();
    assert!(credentials::hold_in(&mut create, "busy", Hold::Shared).await.unwrap().is_some());

    let racing = db.clone();
    let delete = tokio::spawn(async move {
        let mut tx = racing.begin().await.unwrap();
        let held = credentials::hold_in(&mut tx, "busy", Hold::Exclusive).await.unwrap();
        assert!(held.is_some(), "the credential is still there");
        let users = clusters::live_on_credential_in(&mut tx, "busy").await.unwrap();
        if users.is_empty() {
            credentials::delete_in(&mut tx, "busy").await.unwrap();
            tx.commit().await.unwrap();
        }
        users
    });
    tokio::time::sleep(WAITS).await;
    assert!(!delete.is_finished(), "the delete must wait for the create's transaction");
    clusters::insert_in(&mut create, &cluster("k", "busy")).await.unwrap();
    create.commit().await.unwrap();

    let users = delete.await.unwrap();
    assert_eq!(users, ["k"], "the delete that waited should see the cluster");
    assert!(stored(db, "busy").await, "the credential of a live cluster was deleted");
    assert_eq!(live_on(db, "busy").await, ["k"]);
}

/// PostgreSQL: two creates on one credential hold it shared, and neither waits for the other.
async fn creates_share_the_credential(db: &Db, sealer: &SecretBox) {
    add_credential(db, sealer, "shared").await;
    let mut first = db.begin().await.unwrap();
    assert!(credentials::hold_in(&mut first, "shared", Hold::Shared).await.unwrap().is_some());
    let mut second = db.begin().await.unwrap();
    let held = tokio::time::timeout(Duration::from_secs(5), credentials::hold_in(&mut second, "shared", Hold::Shared))
        .await
        .expect("a second shared hold must not wait for the first");
    assert!(held.unwrap().is_some());
    clusters::insert_in(&mut first, &cluster("one", "shared")).await.unwrap();
    clusters::insert_in(&mut second, &cluster("two", "shared")).await.unwrap();
    first.commit().await.unwrap();
    second.commit().await.unwrap();
    assert_eq!(live_on(db, "shared").await, ["one", "two"]);
}

async fn open(url: &str) -> (Db, SecretBox, tempfile::TempDir) {
    let store = Store::connect(url).await.unwrap();
    let db = Db::open(&store).await.unwrap();
    let keys = tempfile::tempdir().unwrap();
    let sealer = SecretBox::load_or_create(keys.path()).unwrap();
    (db, sealer, keys)
}

#[tokio::test]
async fn sqlite_credential_delete_and_cluster_create_do_not_race() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    let (db, sealer, _keys) = open(&url).await;
    delete_first_then_create(&db, &sealer).await;
    create_first_then_delete(&db, &sealer).await;
}

#[test]
fn postgres_credential_delete_and_cluster_create_do_not_race() {
    let database = PgDatabase::create();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (db, sealer, _keys) = open(&database.url).await;
        delete_first_then_create(&db, &sealer).await;
        create_first_then_delete(&db, &sealer).await;
        creates_share_the_credential(&db, &sealer).await;
    });
}
