//! The service-account key the GCP tests use against the fake Compute server: a throwaway RSA
//! key made for tests only. google-cloud-auth signs each request's JWT with it locally (no token
//! exchange), and the fake reads the JWT's issuer.

/// The project the key belongs to.
pub const PROJECT: &str = "anycloud-test";
/// The service account.
pub const CLIENT_EMAIL: &str = "anycloud-ci@anycloud-test.iam.gserviceaccount.com";

/// A throwaway RSA key made for this test only (`openssl genpkey -algorithm RSA`); it signs the
/// JWTs the fake reads and has never belonged to any Google service account.
pub const TEST_ONLY_PRIVATE_KEY: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQC5JF6sUOvxc40e\n\
L5F9JfttnaqsOVbUq7lN6fs7nXalG08nPimLP+HHNr5NxPTdVOrA8rjzmLLUpKQW\n\
NpIrzVmkbCn9AGareudFtaVRm95L3iGrKyz2x1RtR8yfmYAnzdWD8ZPRzWpmQHk+\n\
8OmVGiFqCgIoetieNsVJnxHnuNednMaZy8FUycjGbL11Wf7bUIc/2i3EsETfDE7y\n\
g6EOtuZiFodfp0TIP2Jb9LE1O+TgEHeFFQBTIAolCyPD2yemveRXaimTHSitkxx2\n\
lrcPx9Mf8oueSh7jxo+OwHu7+xEYP3OYjqg1ACUXzebHhDmi4dnYP5hI+XgXH6QQ\n\
rlRJvk+9AgMBAAECggEAKqbgUJ5L3NIb/opC4Cvx4mziNs723AO7quFuiWtbO+ow\n\
r/+4HmZXI0fPS6dGKf84Hb9NMIFLIYXUb3Ge9wxVzHVGrwx6mqKzyPFx5n0cFypT\n\
Y1WNBEUjhBF4aIQ6a/EVcVIkFb9W9buAsylZBoqAjCdGHAFBCiHgDXfh7ho9QgfJ\n\
suTqzHAQLjtJDKKZmcKg19M4lCpM6P0eCdanGTY0ySA4vpYG9fuqrbpw8YajdaOF\n\
180PytwAuMnSnAXABq/R+AKRyaOU+31Gw+WPh/LaQ3OdMQfjCB+Su3AgMYvkXZ3q\n\
XiUIsaH2t7/4l04hET1x5ExvZXtZxIbka7UljTo0GQKBgQDhPs3RNxnNZrWmlwzF\n\
WjZRcBtHREc0W9iYRLc+ldCd1hE95MC1eq+oxF5ccuLURf9k+vQVHGFGgG7joEuc\n\
ALxTGvlpdUBj3jesoP4uXOZa5GFrWNN/XuUaYce52ey0cRTtfn4btSSAdfRtBUve\n\
27f5WDFuwoiLsfYRWgfyK8WS3wKBgQDSa80+8BhrcoLpStNGHQZckKKCZ4nFaPQt\n\
7i9kIuCNZjEjHLbr4cd29zu9yNUHk5tW6su0lVQeaVLGIICoS+e3Jv/ChVaAZEsW\n\
SZGOz6pTVN3+PzSP2gXdTTUPCbKQcdFwF5C4m3wkP0Gc506yNpbISqODzLpA3xkT\n\
brJMgkls4wKBgQCU54zum0uOczDxEXha2zl/euo9odCkt3cnqn2tfSLtxP+e+CPB\n\
lXqcyjxLR5PWmvOskQ5dCmbwUaV9C5IQbpgRJIrvgZjwrI4HrGJ8yeNrAQG6En22\n\
/UfdufhsT7ngy8T3ACFkNcsMtW3ByLeQe5ZS20/KlgXou9wdOnR4TyGM5wKBgFdw\n\
2M/Isj0kTuZnY7iFIzmgGQgbwpK4dJAJpMP2Al6AEvdGXXVUU7FKOBc7t9r4KdtK\n\
ovAeBeDFX9JZe110fYwMtse85R9hjhpq5AP2pA8Q+1dGKK+GqF04Uk43d26y/ZeZ\n\
E1jDtCjT6I4tSPSh3rLI4X5JuzRuAVuj6pAErEKFAoGBAKqPY/Z95BAjgRokJhpj\n\
KHOyxs8smCm9wrU3KvM/7S30WOvoewVKbyk3tchnisWRHzmb7k7NnmyLpdm926uo\n\
qg1VmuCK0SqtG7lCtIVRDZEnsab4utv2XQUBo7HOzcV952uefx2RrxuFOwNCZL7s\n\
GnnuySSxIWPD769qxyG964Q1\n\
-----END PRIVATE KEY-----\n";

/// The key file's JSON.
pub fn service_account_json() -> String {
    service_account_json_of(CLIENT_EMAIL)
}

/// A key file of the same throwaway key for another account of the project (`email`): what a
/// test gives a VM that runs as that account (the fakes read a JWT's issuer, not its signature).
pub fn service_account_json_of(email: &str) -> String {
    serde_json::json!({
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "0123456789abcdef0123456789abcdef01234567",
        "private_key": TEST_ONLY_PRIVATE_KEY,
        "client_email": email,
        "client_id": "100000000000000000001",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": "https://oauth2.googleapis.com/token",
    })
    .to_string()
}
