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
