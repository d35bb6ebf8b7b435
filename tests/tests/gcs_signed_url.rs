//! The signed URL a hosted API's VM fetches its binary through, against the fake Cloud Storage,
//! which checks it as GCS does: signed by `anycloud_checkpoint::GcsBucket` (google-cloud-storage's
//! V4 signer, with the tests' service-account key), it reads that one object until it expires;
//! any change to the URL, another method, or a later time is refused.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anycloud_checkpoint::{BucketUrl, GcsBucket};
use anycloud_tests::fake_gcs::FakeGcs;
use anycloud_tests::gcp_test_key::service_account_json;

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_url_reads_its_object_until_it_expires_and_nothing_else() {
    let fake = FakeGcs::start().await;
    fake.create_bucket("team-api-state");
    fake.put_raw("team-api-state", "binaries/anycloud-ab", b"the binary".to_vec());
    fake.put_raw("team-api-state", "identity/token", b"secret".to_vec());
    let url = BucketUrl::parse("gs://team-api-state/").unwrap();
    let bucket = GcsBucket::new(&url, Some(&service_account_json()), Some(&fake.endpoint())).await.unwrap();
    let signed = bucket.signed_get_url("binaries/anycloud-ab", Duration::from_secs(900)).await.unwrap();
    assert!(signed.starts_with(&format!("{}/team-api-state/binaries/anycloud-ab?", fake.endpoint())), "{signed}");
    assert!(signed.contains("X-Goog-Expires=900"), "{signed}");

    let http = reqwest::Client::new();
    let get = |url: String| {
        let http = http.clone();
        async move {
            let response = http.get(&url).send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    assert_eq!(get(signed.clone()).await, (200, "the binary".to_owned()), "no bearer token needed");

    // Tampered: another object, a longer life, a changed signature, no signature at all.
    let other = signed.replace("binaries/anycloud-ab", "identity/token");
    let longer = signed.replace("X-Goog-Expires=900", "X-Goog-Expires=604800");
    let last = signed.chars().last().unwrap();
    let resigned = format!("{}{}", &signed[..signed.len() - 1], if last == '0' { '1' } else { '0' });
    for (what, url) in [("another object", other), ("a longer life", longer), ("a changed signature", resigned)] {
        let (status, body) = get(url).await;
        assert_eq!(status, 403, "{what}: {body}");
        assert!(body.contains("SignatureDoesNotMatch"), "{what}: {body}");
    }
    let (unsigned, _) = signed.split_once("&X-Goog-Signature=").unwrap();
    assert_eq!(get(unsigned.to_owned()).await.0, 401, "without its signature it is an anonymous call");

    // Another method: the method is part of what was signed.
    let put = http.put(&signed).body("swapped").send().await.unwrap();
    assert_eq!(put.status().as_u16(), 403, "a GET URL does not write");
    let delete = http.delete(&signed).send().await.unwrap();
    assert_eq!(delete.status().as_u16(), 403, "a GET URL does not delete");
    assert_eq!(get(signed.clone()).await, (200, "the binary".to_owned()));

    // Later than its 15 minutes.
    fake.advance_clock(Duration::from_secs(901));
    let (status, body) = get(signed).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("ExpiredToken"), "{body}");
}
