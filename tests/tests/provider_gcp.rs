//! The GCP provider (`GcpCloud`) against the fake Compute Engine server: placement, firewall
//! rules, instances and their idempotency, through google-cloud-compute-v1 with a
//! service-account key whose self-signed JWT the fake checks and records. What is asserted of the
//! cloud's state is asked of the fake, not of the provider.
#![allow(clippy::unwrap_used)]

use anycloud_tests::e2e::block_on;
use anycloud_tests::fake_gce::FakeGce;
use anycloud_tests::fake_google::FakeGoogle;
use anycloud_tests::gcp_test_key::{CLIENT_EMAIL, PROJECT, service_account_json};
use anycloud_workflows::cloud::{Cloud, CloudError, LaunchSpec, Network, Placement, Role};
use anycloud_workflows::cluster::network::Openings;
use anycloud_workflows::db::credentials::PublicPart;
use anycloud_workflows::providers::gcp;
use anycloud_workflows::providers::gcp_cloud::{GcpCloud, IMAGE};
use google_cloud_compute_v1::client::Instances;
use google_cloud_compute_v1::model::{AttachedDisk, AttachedDiskInitializeParams, Instance, NetworkInterface};
use serde_json::{Value, json};

fn public(fake: &FakeGce) -> PublicPart {
    PublicPart {
        identity: CLIENT_EMAIL.into(),
        project: Some(PROJECT.into()),
        endpoint: Some(fake.url()),
        ..PublicPart::default()
    }
}

async fn cloud(fake: &FakeGce) -> GcpCloud {
    GcpCloud::new(&public(fake), &service_account_json()).await.unwrap()
}

fn cluster_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn prefix(cluster_id: &str) -> String {
    format!("ac-{}", &cluster_id.replace('-', "")[..12])
}

fn spec<'a>(placement: &'a Placement, network: &'a Network, name: &str, token: uuid::Uuid) -> LaunchSpec<'a> {
    LaunchSpec {
        placement,
        name: name.into(),
        role: if name == "cp" { Role::ControlPlane } else { Role::Worker },
        user_data: format!("#!/bin/sh\necho {name}\n"),
        token,
        network,
        vm_identity: None,
        reads_secret: false,
        address: None,
    }
}

/// The fake's instances of one cluster.
fn instances_of(fake: &FakeGce, cluster_id: &str) -> Vec<Value> {
    fake.instances(PROJECT).into_iter().filter(|i| i["labels"]["anycloud-cluster"] == cluster_id).collect()
}

fn names(values: &[Value]) -> Vec<String> {
    values.iter().map(|v| v["name"].as_str().unwrap().to_owned()).collect()
}

fn terminal(result: Result<impl std::fmt::Debug, CloudError>) -> String {
    match result {
        Err(CloudError::Terminal(message)) => message,
        other => panic!("expected a terminal error, got {other:?}"),
    }
}

fn retryable(result: Result<impl std::fmt::Debug, CloudError>) -> String {
    match result {
        Err(CloudError::Retryable(message)) => message,
        other => panic!("expected a retryable error, got {other:?}"),
    }
}

#[test]
fn placement_picks_the_regions_first_zone_and_checks_the_machine_type() {
    let fake = FakeGce::start();
    block_on(async {
        let cloud = cloud(&fake).await;
        let id = cluster_id();
        let placement = cloud.placement(&id, "us-central1", "e2-standard-2").await.unwrap();
        assert_eq!(placement.zone.as_deref(), Some("us-central1-a"));
        assert_eq!(placement.image.as_deref(), Some(IMAGE));
        assert_eq!((placement.cluster_id.as_str(), placement.region.as_str()), (id.as_str(), "us-central1"));
        let europe = cloud.placement(&id, "europe-west1", "n2-standard-4").await.unwrap();
        assert_eq!(europe.zone.as_deref(), Some("europe-west1-b"));

        let message = terminal(cloud.placement(&id, "mars-north1", "e2-standard-2").await);
        assert!(message.contains("mars-north1"), "{message}");
        assert!(message.contains("us-central1") && message.contains("europe-west1"), "{message}");
        let message = terminal(cloud.placement(&id, "us-central1", "x9-enormous-960").await);
        assert!(message.contains("machine type x9-enormous-960 is not offered in zone us-central1-a"), "{message}");
        // Offered, but Arm only: the boot image is x86_64.
        let message = terminal(cloud.placement(&id, "us-central1", "t2a-standard-1").await);
        assert!(message.contains("t2a-standard-1 runs ARM64 only") && message.contains("x86_64"), "{message}");
        assert!(message.contains("e2-standard-2"), "{message}");
    });
    // The key's own credentials reached the fake: a JWT signed locally, issued by the account.
    assert_eq!(fake.principals(), vec![CLIENT_EMAIL.to_owned()]);
    assert!(
        fake.requests().iter().all(|r| r.contains("%24alt=json") || r.contains("$alt=json")),
        "{:#?}",
        fake.requests()
    );
}

#[test]
fn a_bad_key_is_terminal_before_any_call() {
    let fake = FakeGce::start();
    block_on(async {
        let message = terminal(GcpCloud::new(&public(&fake), "{\"type\": \"authorized_user\"}").await);
        assert!(message.contains("authorized_user"), "{message}");
        // Parseable, but the key cannot sign: no network is involved, and nothing retries it.
        let broken = service_account_json().replace("MII", "XII");
        let cloud = GcpCloud::new(&public(&fake), &broken).await.unwrap();
        let message = terminal(cloud.placement("c", "us-central1", "e2-standard-2").await);
        assert!(message.contains("authentication") || message.contains("key"), "{message}");
    });
    assert!(fake.requests().is_empty(), "{:#?}", fake.requests());
}

#[test]
fn network_rules_are_created_once_and_deleted() {
    let fake = FakeGce::start();
    block_on(async {
        let cloud = cloud(&fake).await;
        let id = cluster_id();
        let prefix = prefix(&id);
        let placement = cloud.placement(&id, "us-central1", "e2-standard-2").await.unwrap();
        assert!(!cloud.network_exists(&placement).await.unwrap());

        let network = cloud.ensure_network(&placement).await.unwrap();
        assert_eq!(network.id, prefix);
        assert_eq!(cloud.ensure_network(&placement).await.unwrap(), network);
        let rules = fake.firewalls(PROJECT);
        assert_eq!(names(&rules), vec![format!("{prefix}-internal")], "nothing from outside the cluster");
        let internal = &rules[0];
        assert_eq!(internal["allowed"], serde_json::json!([{"IPProtocol": "all"}]));
        assert_eq!(internal["sourceTags"], serde_json::json!([prefix]));
        assert_eq!(internal["targetTags"], serde_json::json!([prefix]));
        assert!(rules.iter().all(|r| r["network"].as_str().unwrap().ends_with("/global/networks/default")));
        assert!(cloud.network_exists(&placement).await.unwrap());
        // One insert, with its deterministic request id; no 409 needed.
        let inserts: Vec<String> =
            fake.requests().into_iter().filter(|r| r.starts_with("POST") && r.contains("/global/firewalls?")).collect();
        assert_eq!(inserts.len(), 1, "{inserts:#?}");
        assert!(inserts.iter().all(|r| r.contains("requestId=")), "{inserts:#?}");

        // Opened to exactly these sources, then to fewer: a rule with other sources is replaced,
        // one with none goes, and the same openings again change nothing.
        let openings = Openings {
            kube_api: vec!["192.0.2.5/32".into(), "198.51.100.7/32".into()],
            wireguard: vec!["198.51.100.7/32".into(), "203.0.113.10/32".into()],
        };
        cloud.open_network(&placement, &openings).await.unwrap();
        cloud.open_network(&placement, &openings).await.unwrap();
        let rules = fake.firewalls(PROJECT);
        assert_eq!(
            names(&rules),
            [format!("{prefix}-internal"), format!("{prefix}-kube-api"), format!("{prefix}-wireguard")]
        );
        assert_eq!(rules[1]["allowed"], serde_json::json!([{"IPProtocol": "tcp", "ports": ["6443"]}]));
        assert_eq!(rules[1]["sourceRanges"], serde_json::json!(["192.0.2.5/32", "198.51.100.7/32"]));
        assert_eq!(rules[2]["allowed"], serde_json::json!([{"IPProtocol": "udp", "ports": ["51820"]}]));
        assert_eq!(rules[2]["sourceRanges"], serde_json::json!(["198.51.100.7/32", "203.0.113.10/32"]));
        assert!(rules[1..].iter().all(|r| r["targetTags"] == serde_json::json!([prefix])), "{rules:#?}");
        cloud
            .open_network(&placement, &Openings { kube_api: vec!["192.0.2.5/32".into()], wireguard: vec![] })
            .await
            .unwrap();
        let rules = fake.firewalls(PROJECT);
        assert_eq!(names(&rules), [format!("{prefix}-internal"), format!("{prefix}-kube-api")]);
        assert_eq!(rules[1]["sourceRanges"], serde_json::json!(["192.0.2.5/32"]));

        cloud.delete_network(&placement).await.unwrap();
        assert!(fake.firewalls(PROJECT).is_empty());
        assert!(!cloud.network_exists(&placement).await.unwrap());
        cloud.delete_network(&placement).await.unwrap();

        // Again within the hour: GCE answers the remembered request ids with the first
        // operations, whose rules are gone; the provider notices and creates them anew.
        cloud.ensure_network(&placement).await.unwrap();
        assert_eq!(fake.firewalls(PROJECT).len(), 1);
        cloud.delete_network(&placement).await.unwrap();
        assert!(fake.firewalls(PROJECT).is_empty());
    });
}

#[test]
fn vms_are_launched_once_listed_by_label_and_terminated() {
    let fake = FakeGce::start();
    block_on(async {
        let cloud = cloud(&fake).await;
        let id = cluster_id();
        let prefix = prefix(&id);
        let placement = cloud.placement(&id, "us-central1", "e2-standard-2").await.unwrap();
        let network = cloud.ensure_network(&placement).await.unwrap();

        let cp_token = uuid::Uuid::new_v4();
        let cp = cloud.launch(&spec(&placement, &network, "cp", cp_token)).await.unwrap();
        let again = cloud.launch(&spec(&placement, &network, "cp", cp_token)).await.unwrap();
        assert_eq!(again.provider_id, cp.provider_id);
        assert_eq!(instances_of(&fake, &id).len(), 1);
        assert!(cp.provider_id.parse::<u64>().is_ok(), "{cp:?}");
        assert_eq!((cp.name.as_str(), cp.role, cp.state.as_str()), ("cp", Role::ControlPlane, "RUNNING"));
        assert!(cp.private_ip.as_deref().unwrap().starts_with("10.128."), "{cp:?}");
        assert!(cp.public_ip.as_deref().unwrap().starts_with("34."), "{cp:?}");
        let inserts: Vec<String> =
            fake.requests().into_iter().filter(|r| r.starts_with("POST") && r.contains("/instances?")).collect();
        assert_eq!(inserts.len(), 1, "the second launch found the VM: {inserts:#?}");
        assert!(inserts[0].contains(&format!("requestId={cp_token}")), "{inserts:#?}");

        for name in ["w0", "w1"] {
            cloud.launch(&spec(&placement, &network, name, uuid::Uuid::new_v4())).await.unwrap();
        }
        let instances = instances_of(&fake, &id);
        assert_eq!(names(&instances), vec![format!("{prefix}-cp"), format!("{prefix}-w0"), format!("{prefix}-w1")]);
        for (instance, (vm, role)) in
            instances.iter().zip([("cp", "control-plane"), ("w0", "worker"), ("w1", "worker")])
        {
            assert_eq!(instance["labels"]["anycloud-vm"], vm);
            assert_eq!(instance["labels"]["anycloud-role"], role);
            assert_eq!(instance["tags"]["items"], serde_json::json!([prefix]));
            assert!(
                instance["machineType"].as_str().unwrap().ends_with("/zones/us-central1-a/machineTypes/e2-standard-2")
            );
            assert_eq!(instance["disks"][0]["boot"], true);
            // The script goes once, as the startup script (as user-data too, cloud-init would run it again).
            let items = instance["metadata"]["items"].as_array().unwrap();
            let keys: Vec<&str> = items.iter().map(|i| i["key"].as_str().unwrap()).collect();
            assert_eq!(keys, ["startup-script"]);
            assert_eq!(items[0]["value"], format!("#!/bin/sh\necho {vm}\n"));
            assert_eq!(instance["networkInterfaces"][0]["accessConfigs"][0]["type"], "ONE_TO_ONE_NAT");
        }

        // Another cluster in the same project is not this cluster's.
        let other = cluster_id();
        let other_placement = cloud.placement(&other, "us-central1", "e2-standard-2").await.unwrap();
        let other_network = cloud.ensure_network(&other_placement).await.unwrap();
        cloud.launch(&spec(&other_placement, &other_network, "cp", uuid::Uuid::new_v4())).await.unwrap();

        let vms = cloud.list_vms(&placement).await.unwrap();
        assert_eq!(vms.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(), vec!["cp", "w0", "w1"]);
        let ids: Vec<String> = vms.iter().map(|v| v.provider_id.clone()).collect();
        let fake_ids: Vec<String> = instances.iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect();
        assert_eq!(ids, fake_ids);
        assert!(fake.requests().iter().any(|r| r.contains("filter=labels.anycloud-cluster")), "{:#?}", fake.requests());

        cloud.terminate(&placement, &ids).await.unwrap();
        assert!(instances_of(&fake, &id).is_empty());
        assert_eq!(fake.instances(PROJECT).len(), 1, "the other cluster's VM stays");
        cloud.terminate(&placement, &ids).await.unwrap();
        assert!(cloud.list_vms(&placement).await.unwrap().is_empty());
        cloud.delete_network(&placement).await.unwrap();
        assert_eq!(fake.firewalls(PROJECT).len(), 1, "the other cluster's rule stays");

        let other_ids: Vec<String> =
            cloud.list_vms(&other_placement).await.unwrap().into_iter().map(|v| v.provider_id).collect();
        cloud.terminate(&other_placement, &other_ids).await.unwrap();
        cloud.delete_network(&other_placement).await.unwrap();
    });
    assert!(fake.instances(PROJECT).is_empty());
    assert!(fake.firewalls(PROJECT).is_empty());
}

#[test]
fn a_repeated_request_id_after_a_lost_response_creates_nothing_more() {
    let fake = FakeGce::start();
    block_on(async {
        // Through the SDK itself: the same insert twice, the first response lost.
        let instances = Instances::builder()
            .with_credentials(gcp::credentials(&service_account_json()).unwrap())
            .with_endpoint(fake.url())
            .build()
            .await
            .unwrap();
        let body = Instance::new()
            .set_name("sdk-direct")
            .set_machine_type("zones/us-central1-b/machineTypes/e2-medium")
            .set_disks([AttachedDisk::new()
                .set_boot(true)
                .set_initialize_params(AttachedDiskInitializeParams::new().set_source_image(IMAGE))])
            .set_network_interfaces([NetworkInterface::new().set_network("global/networks/default")]);
        let insert = |request_id: String| {
            instances
                .insert()
                .set_project(PROJECT)
                .set_zone("us-central1-b")
                .set_request_id(request_id)
                .set_body(body.clone())
                .send()
        };
        let request_id = uuid::Uuid::new_v4().to_string();
        fake.lose_next(1);
        let lost = insert(request_id.clone()).await.unwrap_err();
        assert_eq!(lost.http_status_code(), Some(503), "{lost:?}");
        assert_eq!(fake.instances(PROJECT).len(), 1, "the lost insert happened");
        let op = insert(request_id.clone()).await.unwrap();
        assert_eq!(fake.instances(PROJECT).len(), 1, "the repeated request id created nothing");
        let original = &fake.operations(PROJECT)[0];
        assert_eq!(op.name.as_deref(), original["name"].as_str());
        assert_eq!(op.target_id.map(|id| id.to_string()).as_deref(), fake.instances(PROJECT)[0]["id"].as_str());
        // Another request id for the same name is a conflict.
        let conflict = insert(uuid::Uuid::new_v4().to_string()).await.unwrap_err();
        assert_eq!(conflict.http_status_code(), Some(409), "{conflict:?}");
        assert!(conflict.status().unwrap().message.contains("already exists"), "{conflict:?}");

        // Through the provider: a launch whose insert response is lost fails retryably, and its
        // retry (same token) finds the VM instead of making a second one.
        let cloud = cloud(&fake).await;
        let id = cluster_id();
        let placement = cloud.placement(&id, "us-central1", "e2-standard-2").await.unwrap();
        let network = cloud.ensure_network(&placement).await.unwrap();
        let token = uuid::Uuid::new_v4();
        fake.lose_next(1);
        retryable(cloud.launch(&spec(&placement, &network, "cp", token)).await);
        let vm = cloud.launch(&spec(&placement, &network, "cp", token)).await.unwrap();
        let created = instances_of(&fake, &id);
        assert_eq!(created.len(), 1);
        assert_eq!(created[0]["id"].as_str(), Some(vm.provider_id.as_str()));
    });
}

#[test]
fn faults_are_retryable_and_quota_is_terminal() {
    let fake = FakeGce::start();
    block_on(async {
        let cloud = cloud(&fake).await;
        let id = cluster_id();
        fake.fail_next(1);
        // A GET answered 503 is retried by the client itself.
        let placement = cloud.placement(&id, "us-central1", "e2-standard-2").await.unwrap();
        let network = cloud.ensure_network(&placement).await.unwrap();

        // An insert is not retried by the client: the provider says retryable, nothing exists.
        fake.fail_next_with(1, 503, Some("POST"));
        retryable(cloud.launch(&spec(&placement, &network, "cp", uuid::Uuid::new_v4())).await);
        fake.fail_next_with(1, 429, Some("POST"));
        retryable(cloud.launch(&spec(&placement, &network, "cp", uuid::Uuid::new_v4())).await);
        assert!(instances_of(&fake, &id).is_empty());

        // Two vCPUs of quota: the control plane fits, a worker does not.
        fake.set_cpu_quota(Some(2));
        cloud.launch(&spec(&placement, &network, "cp", uuid::Uuid::new_v4())).await.unwrap();
        let message = terminal(cloud.launch(&spec(&placement, &network, "w0", uuid::Uuid::new_v4())).await);
        assert!(message.contains("QUOTA_EXCEEDED"), "{message}");
        assert_eq!(instances_of(&fake, &id).len(), 1);
        fake.set_cpu_quota(None);

        let ids: Vec<String> = cloud.list_vms(&placement).await.unwrap().into_iter().map(|v| v.provider_id).collect();
        cloud.terminate(&placement, &ids).await.unwrap();
        cloud.delete_network(&placement).await.unwrap();
    });
    assert!(fake.instances(PROJECT).is_empty());
    assert!(fake.firewalls(PROJECT).is_empty());
}

/// A hosted API's VM runs as a service account made for it (behind the fake Google front, where
/// the fake IAM holds accounts and the project's policy): made once however often it is ensured,
/// bound on the project to exactly its conditioned Compute Engine roles (a change another
/// administrator makes between the read and the write is kept, the write done again), reading
/// exactly its secrets; an instance cannot run as an account that does not exist; deleted twice,
/// nothing of it is left and the others' bindings stay.
#[test]
fn a_hosted_apis_vm_gets_its_port_and_runs_as_an_account_of_its_own() {
    let google = FakeGoogle::start();
    let fake = google.gce().clone();
    let auditor = json!({"role": "roles/viewer", "members": ["user:auditor@example.com"]});
    google.iam().seed_binding(PROJECT, auditor.clone());
    block_on(async {
        let public = PublicPart { endpoint: Some(google.endpoint()), ..public(&fake) };
        let cloud = GcpCloud::new(&public, &service_account_json()).await.unwrap();
        let owner = "api-0123456789ab";
        let prefix = format!("ac-{}", "api0123456789ab".chars().take(12).collect::<String>());
        let placement = cloud.placement(owner, "us-central1", "e2-standard-2").await.unwrap();
        let network = cloud.ensure_api_network(&placement, 8443).await.unwrap();
        assert_eq!(cloud.ensure_api_network(&placement, 8443).await.unwrap(), network);
        let rules = fake.firewalls(PROJECT);
        assert_eq!(names(&rules), vec![format!("{prefix}-https")]);
        assert_eq!(rules[0]["allowed"], json!([{"IPProtocol": "tcp", "ports": ["8443"]}]));
        assert_eq!(rules[0]["targetTags"], json!([prefix]));

        // The secret is stored first (the deploy's order): the account is made for its binding.
        let secret = cloud.store_vm_secret(owner, "anycloud-api-0123456789ab-keys", "keys").await.unwrap();
        let email = "anycloud-api0123456789ab@anycloud-test.iam.gserviceaccount.com";
        assert_eq!(google.iam().accounts(PROJECT), [email, CLIENT_EMAIL], "the API's own account, and the deployer's");
        let concurrent = json!({"role": "roles/logging.viewer", "members": ["group:ops@example.com"]});
        google.iam().change_after_next_read(PROJECT, concurrent.clone());
        let identity = cloud.ensure_vm_identity(owner, "gs://team-api-state/", std::slice::from_ref(&secret)).await;
        assert_eq!(identity.unwrap(), email, "the VM runs as the API's own account, not {CLIENT_EMAIL}");
        let account = google.iam().account(email).unwrap();
        assert_eq!(account["displayName"], format!("anycloud hosted API {owner}"), "{account:#}");
        let member = format!("serviceAccount:{email}");
        let condition = |title: &str, types: &[(&str, &str)]| {
            let clauses: Vec<String> = types
                .iter()
                .map(|(kind, collection)| {
                    format!(
                        "(resource.type != \"compute.googleapis.com/{kind}\" || \
                         resource.name.extract(\"/{collection}/{{name}}\").startsWith(\"ac-\"))"
                    )
                })
                .collect();
            json!({"title": title, "description": "only the ac-... resources anycloud names",
                   "expression": clauses.join(" && ")})
        };
        let mut expected = vec![
            (
                "roles/compute.instanceAdmin.v1".to_owned(),
                condition("anycloud-instances", &[("Instance", "instances"), ("Disk", "disks")]),
            ),
            ("roles/compute.publicIpAdmin".to_owned(), Value::Null),
            ("roles/compute.securityAdmin".to_owned(), condition("anycloud-firewalls", &[("Firewall", "firewalls")])),
        ];
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        let bindings_of = |member: &str| {
            let mut held = google.iam().bindings_of(PROJECT, member);
            held.sort_by(|a, b| a.0.cmp(&b.0));
            held
        };
        assert_eq!(bindings_of(&member), expected, "exactly its roles, each with its condition");
        let project = google.iam().project_bindings(PROJECT);
        for kept in [&auditor, &concurrent] {
            assert!(project.contains(kept), "another administrator's binding is kept: {project:#?}");
        }
        assert_eq!(bindings_of(&format!("serviceAccount:{CLIENT_EMAIL}")), [("roles/owner".to_owned(), Value::Null)]);
        let reader = json!([{"role": "roles/secretmanager.secretAccessor", "members": [member]}]);
        assert_eq!(google.secrets().policy(&secret).unwrap()["bindings"], reader, "it alone reads its secret");

        // Ensured again (a step retried): nothing is written.
        let writes = google.iam().policy_writes(PROJECT);
        assert_eq!(
            cloud.ensure_vm_identity(owner, "gs://team-api-state/", std::slice::from_ref(&secret)).await.unwrap(),
            email
        );
        assert_eq!(google.iam().policy_writes(PROJECT), writes, "a second ensure writes no policy");
        assert_eq!(google.iam().accounts(PROJECT).len(), 2);
        assert_eq!(bindings_of(&member), expected);

        let mut launch = spec(&placement, &network, "api", uuid::Uuid::new_v4());
        launch.role = Role::HostedApi;
        launch.vm_identity = Some("anycloud-nobody000000@anycloud-test.iam.gserviceaccount.com".to_owned());
        let refused = cloud.launch(&launch).await.unwrap_err().to_string();
        assert!(refused.contains("does not have access to service account"), "{refused}");
        assert!(refused.contains("iam.serviceAccounts.actAs") && refused.contains("setIamPolicy"), "{refused}");
        launch.vm_identity = Some(email.to_owned());
        let vm = cloud.launch(&launch).await.unwrap();
        assert_eq!(vm.role, Role::HostedApi);
        let instance = instances_of(&fake, owner).pop().unwrap();
        assert_eq!(instance["serviceAccounts"][0]["email"], email, "{instance:#}");
        assert_eq!(
            instance["serviceAccounts"][0]["scopes"],
            json!(["https://www.googleapis.com/auth/devstorage.read_write"])
        );

        cloud.terminate(&placement, std::slice::from_ref(&vm.provider_id)).await.unwrap();
        until_no_vms(&cloud, &placement).await;
        cloud.delete_network(&placement).await.unwrap();
        assert!(fake.firewalls(PROJECT).is_empty());
        assert!(!cloud.network_exists(&placement).await.unwrap());
        cloud.delete_vm_identity(owner).await.unwrap();
        cloud.delete_vm_identity(owner).await.unwrap();
        assert_eq!(google.iam().accounts(PROJECT), [CLIENT_EMAIL], "the API's account is deleted");
        let left = serde_json::to_string(&google.iam().project_bindings(PROJECT)).unwrap();
        assert!(!left.contains(email), "no binding names it, deleted or not: {left}");
        let project = google.iam().project_bindings(PROJECT);
        for kept in [&auditor, &concurrent] {
            assert!(project.contains(kept), "{project:#?}");
        }
    });
}

/// Until the provider lists no VM of the placement.
async fn until_no_vms(cloud: &GcpCloud, placement: &Placement) {
    for _ in 0..100 {
        if cloud.list_vms(placement).await.unwrap().is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the VM was not gone");
}

/// A cluster whose create was cancelled before `pin_placement` pinned its zone has a record
/// without one; its delete lists and terminates nothing instead of failing on the missing zone
/// (the crash matrix saw such a delete fail terminally and the cluster stay `deleting`).
#[test]
fn a_placement_without_a_zone_has_no_instances_to_list_or_terminate() {
    let fake = FakeGce::start();
    block_on(async {
        let cloud = cloud(&fake).await;
        let placement = Placement {
            cluster_id: cluster_id(),
            region: "us-central1".into(),
            zone: None,
            vm_type: "e2-standard-2".into(),
            image: None,
        };
        assert!(cloud.list_vms(&placement).await.unwrap().is_empty());
        cloud.terminate(&placement, &[]).await.unwrap();
        assert!(!cloud.network_exists(&placement).await.unwrap());
    });
}

/// The control plane's static external address: reserved once (found again by name, also after a
/// lost answer), the instance's `natIP` from its insert on, refused for deletion while the
/// instance uses it (retryable), released once it is gone; another cluster's address stays.
#[test]
fn a_static_address_is_reserved_once_given_at_launch_and_released_after_the_vm() {
    let fake = FakeGce::start();
    block_on(async {
        let cloud = cloud(&fake).await;
        let id = cluster_id();
        let prefix = prefix(&id);
        let placement = cloud.placement(&id, "us-central1", "e2-standard-2").await.unwrap();
        let network = cloud.ensure_network(&placement).await.unwrap();

        // The first insert's answer is lost: the retry finds the address, no second one is made.
        fake.lose_next(1);
        let lost = cloud.ensure_address(&placement, "cp").await;
        assert!(matches!(lost, Err(CloudError::Retryable(_))), "{lost:?}");
        let address = cloud.ensure_address(&placement, "cp").await.unwrap();
        assert_eq!(address.id, format!("{prefix}-cp-ip"));
        assert_eq!(cloud.ensure_address(&placement, "cp").await.unwrap(), address);
        let held = fake.addresses(PROJECT);
        assert_eq!(held.len(), 1, "{held:#?}");
        assert_eq!(
            (held[0]["status"].as_str(), held[0]["address"].as_str()),
            (Some("RESERVED"), Some(address.ip.as_str()))
        );
        assert!(held[0]["region"].as_str().unwrap().ends_with("/regions/us-central1"));

        let other = cluster_id();
        let other_placement = cloud.placement(&other, "us-central1", "e2-standard-2").await.unwrap();
        let other_address = cloud.ensure_address(&other_placement, "cp").await.unwrap();
        assert_ne!(other_address.ip, address.ip);

        let cp = cloud
            .launch(&LaunchSpec { address: Some(&address), ..spec(&placement, &network, "cp", uuid::Uuid::new_v4()) })
            .await
            .unwrap();
        assert_eq!(cp.public_ip.as_deref(), Some(address.ip.as_str()), "the reserved address is the VM's natIP");
        assert!(cloud.attach_address(&placement, &address, &cp).await.unwrap());
        let held = fake.addresses(PROJECT);
        let ours = held.iter().find(|a| a["name"] == address.id.as_str()).unwrap();
        assert_eq!(ours["status"], "IN_USE");
        assert!(ours["users"][0].as_str().unwrap().ends_with(&format!("/instances/{prefix}-cp")), "{ours:#}");

        // Another instance cannot take it, and it cannot be released while the VM uses it.
        let taken = cloud
            .launch(&LaunchSpec { address: Some(&address), ..spec(&placement, &network, "w0", uuid::Uuid::new_v4()) })
            .await;
        assert!(terminal(taken).contains("already being used"));
        let message = retryable(cloud.release_addresses(&placement).await);
        assert!(message.contains("still uses it"), "{message}");
        assert_eq!(cloud.list_addresses(&placement).await.unwrap(), std::slice::from_ref(&address));

        cloud.terminate(&placement, std::slice::from_ref(&cp.provider_id)).await.unwrap();
        until_no_vms(&cloud, &placement).await;
        cloud.release_addresses(&placement).await.unwrap();
        cloud.release_addresses(&placement).await.unwrap();
        assert!(cloud.list_addresses(&placement).await.unwrap().is_empty());
        assert_eq!(cloud.list_addresses(&other_placement).await.unwrap(), [other_address]);
        cloud.release_addresses(&other_placement).await.unwrap();
        cloud.delete_network(&placement).await.unwrap();
    });
    assert!(fake.addresses(PROJECT).is_empty());
}
