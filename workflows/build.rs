//! Rebuild when a migration is added: `sqlx::migrate!` embeds the directory but does not watch it.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
