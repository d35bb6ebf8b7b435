//! A cluster delete and a new deployment on the same cluster cannot race: both take the
//! cluster's row (PostgreSQL `FOR UPDATE`; SQLite's single writer) in the transaction that
//! decides, so whichever commits second sees the first (on both stores).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_engine::Store;
use anycloud_tests::e2e::{self, PgDatabase};
use anycloud_workflows::db::Db;
use anycloud_workflows::db::clusters::{self, Cluster, Phase};
use anycloud_workflows::db::deployments::{self, DeploymentKind, NewDeployment, PlacementRefused};
use anycloud_workflows::db::spec::Spec;

async fn ready_cluster(store: &Store, name: &str) -> Cluster {
    Db::open(store).await.unwrap();
    let cluster = Cluster { phase: Phase::Ready, ..e2e::cluster_record(name, "c") };
    let mut tx = store.begin_write().await.unwrap();
    clusters::insert_in(&mut tx, &cluster).await.unwrap();
    tx.commit().await.unwrap();
    cluster
}

static SPEC: std::sync::LazyLock<Spec> = std::sync::LazyLock::new(|| Spec {
    image: "python:3.12".into(),
    command: vec!["python".into(), "batch.py".into()],
    env: Vec::new(),
    cpus: None,
    memory: None,
    secrets: Vec::new(),
});

fn deployment(id: &str) -> NewDeployment<'_> {
    NewDeployment {
        id,
        name: id,
        kind: DeploymentKind::Job,
        spec: &SPEC,
        workflow_id: "00000000-0000-0000-0000-000000000000",
    }
}

/// A delete holds the row; a deployment started meanwhile waits, then is refused.
async fn delete_first_then_deployment(store: Store) {
    let cluster = ready_cluster(&store, "shared").await;
    let mut delete = store.begin_write().await.unwrap();
    let locked = clusters::lock_live_in(&mut delete, "shared").await.unwrap().unwrap();
    assert!(deployments::active_on_cluster_in(&mut delete, &locked.id).await.unwrap().is_empty());

    let racing = store.clone();
    let deploy = tokio::spawn(async move {
        let mut tx = racing.begin_write().await.unwrap();
        let result = deployments::add_in(&mut tx, "shared", deployment("job-1"), 1).await.map(|_| ());
        if result.is_ok() {
            tx.commit().await.unwrap();
        }
        result
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!deploy.is_finished(), "the deployment must wait for the delete's transaction");
    clusters::request_delete_in(&mut delete, &cluster.id, "delete-run", 2).await.unwrap();
    delete.commit().await.unwrap();

    match deploy.await.unwrap() {
        Err(PlacementRefused::NotReady { deleting: true, .. }) => {}
        other => panic!("the deployment should be refused as the cluster is being deleted: {other:?}"),
    }
    let mut check = store.begin_write().await.unwrap();
    assert!(deployments::active_on_cluster_in(&mut check, &cluster.id).await.unwrap().is_empty());
}

/// A deployment committed first is what the delete's check then sees.
async fn deployment_first_then_delete(store: Store) {
    let cluster = ready_cluster(&store, "busy").await;
    let mut tx = store.begin_write().await.unwrap();
    deployments::add_in(&mut tx, "busy", deployment("svc-1"), 1).await.unwrap();
    tx.commit().await.unwrap();
    let mut delete = store.begin_write().await.unwrap();
    clusters::lock_live_in(&mut delete, "busy").await.unwrap().unwrap();
    assert_eq!(deployments::active_on_cluster_in(&mut delete, &cluster.id).await.unwrap(), ["svc-1"]);
    drop(delete);
    // The record reads back whole on both stores (every column decodes as the code types it).
    let db = Db::open(&store).await.unwrap();
    assert!(deployments::end(&db, "svc-1", 1, deployments::Status::Errored, Some(3), Some("Error"), 2).await.unwrap());
    let found = deployments::find(&db, "svc-1").await.unwrap().unwrap();
    assert_eq!((found.attempt, found.exit_code, found.status), (1, Some(3), deployments::Status::Errored));
    assert_eq!(deployments::list(&db, None, None, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn sqlite_delete_and_deployment_do_not_race() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    delete_first_then_deployment(Store::connect(&url).await.unwrap()).await;
    deployment_first_then_delete(Store::connect(&url).await.unwrap()).await;
}

#[test]
fn postgres_delete_and_deployment_do_not_race() {
    let database = PgDatabase::create();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        delete_first_then_deployment(Store::connect(&database.url).await.unwrap()).await;
        deployment_first_then_delete(Store::connect(&database.url).await.unwrap()).await;
    });
}
