//! The checkpoint's bucket calls on S3 (moto), as the checkpoint relies on them: a create
//! loses to an existing key, a replace loses to a changed object, a missing key reads `None`.
#![allow(clippy::unwrap_used)]

use anycloud_checkpoint::{Bucket, BucketError, BucketUrl, S3Access, S3Bucket};
use anycloud_tests::e2e::{self, Moto};
use bytes::Bytes;

#[test]
fn s3_conditional_writes_fence() {
    let moto = Moto::start();
    e2e::block_on(async {
        let url = BucketUrl::parse("s3://fence-bucket").unwrap();
        let access = S3Access {
            keys: Some(("AKIAANYCLOUDCHECKPT1".into(), "secret".into())),
            region: Some("us-east-1".into()),
            endpoint: Some(moto.endpoint.clone()),
        };
        let bucket = S3Bucket::new(&url, &access).await;
        match bucket.get("k").await {
            Err(BucketError::Refused(message)) => assert!(message.contains("fence-bucket"), "{message}"),
            other => panic!("a missing bucket: {other:?}"),
        }
        bucket.client().create_bucket().bucket("fence-bucket").send().await.unwrap();
        // Versioned, as a hosted API's bucket is.
        let versioning = aws_sdk_s3::types::VersioningConfiguration::builder()
            .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
            .build();
        let client = bucket.client();
        client
            .put_bucket_versioning()
            .bucket("fence-bucket")
            .versioning_configuration(versioning)
            .send()
            .await
            .unwrap();
        assert!(bucket.get("k").await.unwrap().is_none());
        let first = bucket.create("k", Bytes::from_static(b"one")).await.unwrap();
        assert!(matches!(bucket.create("k", Bytes::from_static(b"two")).await, Err(BucketError::Conflict(_))));
        let (body, version) = bucket.get("k").await.unwrap().unwrap();
        assert_eq!((&body[..], &version), (&b"one"[..], &first));
        let second = bucket.replace("k", Bytes::from_static(b"three"), &first).await.unwrap();
        assert_ne!(second, first);
        assert!(matches!(
            bucket.replace("k", Bytes::from_static(b"four"), &first).await,
            Err(BucketError::Conflict(_))
        ));
        assert_eq!(&bucket.get("k").await.unwrap().unwrap().0[..], b"three");
        bucket.delete(&["k".to_owned(), "never-was".to_owned()]).await.unwrap();
        assert!(bucket.get("k").await.unwrap().is_none());
    });
}

/// The account moto names for any keys it did not issue (STS `GetCallerIdentity`).
const MOTO_ACCOUNT: &str = "123456789012";

/// Every S3 call names the credentials' account (STS) as the bucket's expected owner: `ensure`,
/// the checkpoint's four calls and `destroy`, as the requests that reach moto show. moto does
/// not check the header, so the fault proxy in front of it answers as S3 does: a bucket of
/// another account (one a bucket sniper made and opened to everyone) is refused at every call,
/// and `ensure` neither adopts nor changes it.
#[test]
fn every_s3_call_names_the_account_that_must_own_the_bucket() {
    use anycloud_checkpoint::Version;
    use anycloud_tests::fault_proxy::{Dialect, FaultPlan, FaultProxy};

    let moto = Moto::start();
    let proxy = FaultProxy::start(&moto.endpoint, Dialect::Ec2, FaultPlan::spread(1, 0.0));
    let access = S3Access {
        keys: Some(("AKIAANYCLOUDOWNER001".into(), "secret".into())),
        region: Some("us-east-1".into()),
        endpoint: Some(proxy.url()),
    };
    e2e::block_on(async {
        let ours = S3Bucket::new(&BucketUrl::parse("s3://owned-bucket").unwrap(), &access).await;
        assert_eq!(ours.expected_owner().await.unwrap(), MOTO_ACCOUNT);
        assert_eq!(ours.ensure("us-east-1").await.unwrap(), anycloud_checkpoint::provision::Made::Created);
        let v1 = ours.create("k", Bytes::from_static(b"one")).await.unwrap();
        ours.replace("k", Bytes::from_static(b"two"), &v1).await.unwrap();
        assert!(ours.get("k").await.unwrap().is_some());
        ours.delete(&["k".to_owned()]).await.unwrap();
        assert!(ours.destroy().await.unwrap() > 0);

        let seen = proxy.seen();
        let s3: Vec<_> = seen.iter().filter(|r| r.target.starts_with("/owned-bucket")).collect();
        // HeadBucket, CreateBucket, the three settings, put, put, get, delete, the list, its
        // delete and DeleteBucket: all but CreateBucket (which takes no owner) name it.
        assert!(s3.len() >= 10, "{s3:#?}");
        for request in &s3 {
            let create_bucket = request.method == "PUT" && request.target.trim_end_matches('/') == "/owned-bucket";
            if !create_bucket {
                assert_eq!(request.header("x-amz-expected-bucket-owner"), Some(MOTO_ACCOUNT), "{request:#?}");
            }
        }
        let sts = seen.iter().filter(|r| r.header("authorization").is_some_and(|a| a.contains("/sts/"))).count();
        assert_eq!(sts, 1, "the account is asked once");

        // Another account's bucket, open to these keys: refused at every call.
        let taken = S3Bucket::new(&BucketUrl::parse("s3://sniped-bucket").unwrap(), &access).await;
        taken.client().create_bucket().bucket("sniped-bucket").send().await.unwrap();
        proxy.set_bucket_owner("sniped-bucket", "999999999999");
        let refused = |what: &str, result: Result<(), BucketError>| match result {
            Err(BucketError::Refused(message)) => {
                assert!(message.contains("sniped-bucket") && message.contains("account"), "{what}: {message}");
            }
            other => panic!("{what}: {other:?}"),
        };
        refused("ensure", taken.ensure("us-east-1").await.map(drop));
        refused("get", taken.get("k").await.map(drop));
        refused("create", taken.create("k", Bytes::from_static(b"x")).await.map(drop));
        refused("replace", taken.replace("k", Bytes::from_static(b"x"), &Version("\"e\"".into())).await.map(drop));
        refused("delete", taken.delete(&["k".to_owned()]).await);
        refused("destroy", taken.destroy().await.map(drop));
        let raw = taken.client();
        let objects = raw.list_objects_v2().bucket("sniped-bucket").send().await.unwrap();
        assert_eq!(objects.key_count(), Some(0), "nothing was written to it");
        assert!(raw.get_bucket_versioning().bucket("sniped-bucket").send().await.unwrap().status().is_none());
    });
}
