//! The `anycloud` binary a hosted API's VM runs, and how it gets there.
//!
//! Two sources, recorded on the API (`binary_url`, `binary_sha256`):
//!
//! - **shipped** (the default): the deploying CLI uploads a binary (its own, or `--binary FILE`)
//!   to the deploying API, which stages it by its SHA-256 ([`stage`]); `api.deploy`'s
//!   `ship_binary` step copies it into the API's bucket at [`object_key`], and the VM fetches it
//!   through a short-lived signed GET URL. `binary_url` is then the object's bucket URL
//!   (`s3://B/P/binaries/anycloud-SHA`), `binary_sha256` its one `ARCH=HEX`.
//! - **hosted** by the operator (`--binary-url`): an `https://` URL (`{arch}` replaced) and one
//!   `ARCH=HEX` per architecture the operator serves.
//!
//! Either way the VM checks the SHA-256 written in its user-data before it runs a byte: the URL
//! is readable by whoever reads user-data, the sum is what protects the binary.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The largest binary the deploying API stages (a release build is ~60 MiB, a debug one more).
pub const MAX_BINARY_BYTES: u64 = 1024 * 1024 * 1024;

pub use anycloud_providers::arch::Arch;

/// A binary the deploying API holds, as its upload answered (`PUT /v1/binaries/{sha256}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StagedBinary {
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
    /// What it runs on, from its ELF header.
    pub arch: Arch,
    /// Its size in bytes.
    pub size: u64,
}

/// The SHA-256 of each architecture, `x86_64=HEX,aarch64=HEX` as flags and the record write it.
pub type Sums = BTreeMap<Arch, String>;

/// The SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// Whether `sum` is a SHA-256 in hex.
pub fn is_sha256(sum: &str) -> bool {
    sum.len() == 64 && sum.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Parses `ARCH=HEX[,ARCH=HEX]` (several flags' values joined by `,` too); the error names the
/// part that is wrong and what a good one looks like.
pub fn parse_sums(text: &str) -> Result<Sums, String> {
    let mut sums = Sums::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((arch, sum)) = part.split_once('=') else {
            return Err(format!("`{part}` is not ARCH=SHA256 (e.g. x86_64=<64 hex digits>)"));
        };
        let Some(arch) = Arch::parse(arch.trim()) else {
            return Err(format!("`{arch}` is not an architecture anycloud runs on: x86_64 or aarch64"));
        };
        let sum = sum.trim().to_ascii_lowercase();
        if !is_sha256(&sum) {
            return Err(format!("the SHA-256 of {arch} `{sum}` is not 64 hex digits"));
        }
        if sums.insert(arch, sum).is_some() {
            return Err(format!("{arch} has two SHA-256s"));
        }
    }
    if sums.is_empty() {
        return Err("no ARCH=SHA256 given".to_owned());
    }
    Ok(sums)
}

/// `x86_64=HEX,aarch64=HEX`.
pub fn format_sums(sums: &Sums) -> String {
    sums.iter().map(|(arch, sum)| format!("{arch}={sum}")).collect::<Vec<_>>().join(",")
}

/// Where a hosted API's VM gets its binary, as its record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinarySource {
    /// Shipped by the deploy into the API's bucket, at [`object_key`].
    Shipped {
        /// Its SHA-256.
        sha256: String,
        /// What it runs on.
        arch: Arch,
    },
    /// Hosted by the operator.
    Hosted {
        /// `https://...`, `{arch}` replaced by the VM's architecture.
        url: String,
        /// The SHA-256 of each architecture served.
        sums: Sums,
    },
}

impl BinarySource {
    /// Reads the record's two columns back (`binary_url`, `binary_sha256`).
    pub fn of_record(url: &str, sums: Option<&str>) -> Result<Self, String> {
        let sums = parse_sums(sums.unwrap_or_default()).map_err(|why| format!("the recorded binary's sums: {why}"))?;
        if url.starts_with("s3://") || url.starts_with("gs://") {
            let mut only = sums.into_iter();
            match (only.next(), only.next()) {
                (Some((arch, sha256)), None) => Ok(Self::Shipped { sha256, arch }),
                _ => Err(format!("the shipped binary {url} must have exactly one ARCH=SHA256")),
            }
        } else {
            Ok(Self::Hosted { url: url.to_owned(), sums })
        }
    }

    /// The architectures it can run on.
    pub fn arches(&self) -> Vec<Arch> {
        match self {
            Self::Shipped { arch, .. } => vec![*arch],
            Self::Hosted { sums, .. } => sums.keys().copied().collect(),
        }
    }
}

/// The key of a shipped binary in the API's bucket, under its prefix: content-addressed, so a
/// second deploy of the same binary finds it there.
pub fn object_key(prefix: &str, sha256: &str) -> String {
    format!("{prefix}binaries/anycloud-{sha256}")
}

/// Where the deploying API keeps a staged binary until `ship_binary` copies it to the bucket.
pub fn staged_path(dir: &Path, sha256: &str) -> PathBuf {
    dir.join(format!("anycloud-{sha256}"))
}

/// The staged binary `sha256` in `dir`, when it is there whole (its arch from its header).
pub fn staged(dir: &Path, sha256: &str) -> Result<Option<StagedBinary>, String> {
    let path = staged_path(dir, sha256);
    let mut header = [0u8; 20];
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(format!("reading {}: {err}", path.display())),
    };
    let size = file.metadata().map_err(|err| format!("reading {}: {err}", path.display()))?.len();
    std::io::Read::read_exact(&mut &file, &mut header).map_err(|err| format!("reading {}: {err}", path.display()))?;
    let arch = Arch::of_elf(&header)?;
    Ok(Some(StagedBinary { sha256: sha256.to_owned(), arch, size }))
}

/// Receives a binary into `dir` as it streams in (`chunks`), at most [`MAX_BINARY_BYTES`]: it
/// is kept only if its SHA-256 is `sha256` and its ELF header names an architecture the VMs run.
/// Written to a temporary file, synced, then renamed: a crash leaves no half binary under its
/// name. Staging the same binary again replaces it with the same bytes.
pub async fn stage<S, E>(dir: &Path, sha256: &str, mut chunks: S) -> Result<StagedBinary, String>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    use futures::StreamExt;
    let sha256 = sha256.to_ascii_lowercase();
    if !is_sha256(&sha256) {
        return Err(format!("`{sha256}` is not a SHA-256 (64 hex digits)"));
    }
    std::fs::create_dir_all(dir).map_err(|err| format!("creating {}: {err}", dir.display()))?;
    let tmp = dir.join(format!(".upload-{}", uuid::Uuid::new_v4().simple()));
    let result = async {
        let mut file = std::fs::File::create(&tmp).map_err(|err| format!("creating {}: {err}", tmp.display()))?;
        let mut hasher = Sha256::new();
        let mut header = Vec::with_capacity(20);
        let mut size = 0u64;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|err| format!("the upload broke off after {size} bytes: {err}"))?;
            size += chunk.len() as u64;
            if size > MAX_BINARY_BYTES {
                return Err(format!("the binary is larger than {} MiB", MAX_BINARY_BYTES / 1024 / 1024));
            }
            if header.len() < 20 {
                header.extend_from_slice(&chunk[..chunk.len().min(20 - header.len())]);
            }
            hasher.update(&chunk);
            file.write_all(&chunk).map_err(|err| format!("writing {}: {err}", tmp.display()))?;
        }
        let actual = format!("{:x}", hasher.finalize());
        if actual != sha256 {
            return Err(format!("the body's SHA-256 is {actual}, not {sha256}: it was changed on the way"));
        }
        let arch = Arch::of_elf(&header).map_err(|why| format!("the binary cannot run on a VM: {why}"))?;
        file.sync_all().map_err(|err| format!("syncing {}: {err}", tmp.display()))?;
        std::fs::rename(&tmp, staged_path(dir, &sha256)).map_err(|err| format!("storing the binary: {err}"))?;
        Ok(StagedBinary { sha256: sha256.clone(), arch, size })
    }
    .await;
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(machine: u16) -> Vec<u8> {
        let mut header = b"\x7fELF\x02\x01\x01".to_vec();
        header.resize(18, 0);
        header.extend_from_slice(&machine.to_le_bytes());
        header.resize(64, 0);
        header
    }

    #[test]
    fn the_elf_header_names_the_architecture() {
        assert_eq!(Arch::of_elf(&elf(62)), Ok(Arch::X86_64));
        assert_eq!(Arch::of_elf(&elf(183)), Ok(Arch::Aarch64));
        assert!(Arch::of_elf(&elf(40)).unwrap_err().contains("machine 40"));
        assert!(Arch::of_elf(b"#!/bin/sh\necho hi\n and more").unwrap_err().contains("no ELF header"));
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(Arch::of_elf(&exe[..20]).ok(), Arch::current(), "this test binary's own header");
    }

    #[test]
    fn sums_are_one_per_architecture() {
        let x = "a".repeat(64);
        let a = "B".repeat(64);
        let sums = parse_sums(&format!("x86_64={x}, arm64={a}")).unwrap();
        assert_eq!(format_sums(&sums), format!("x86_64={x},aarch64={}", "b".repeat(64)));
        assert!(parse_sums(&x).unwrap_err().contains("ARCH=SHA256"));
        assert!(parse_sums("riscv64=00").unwrap_err().contains("riscv64"));
        assert!(parse_sums("x86_64=00").unwrap_err().contains("64 hex"));
        assert!(parse_sums(&format!("x86_64={x},amd64={x}")).unwrap_err().contains("two"));
        assert!(parse_sums("").is_err());
    }

    #[test]
    fn the_record_says_which_source() {
        let x = "c".repeat(64);
        let shipped = BinarySource::of_record("s3://b/p/binaries/anycloud-x", Some(&format!("x86_64={x}"))).unwrap();
        assert_eq!(shipped, BinarySource::Shipped { sha256: x.clone(), arch: Arch::X86_64 });
        let hosted = BinarySource::of_record("https://h/{arch}", Some(&format!("aarch64={x}"))).unwrap();
        assert_eq!(hosted.arches(), vec![Arch::Aarch64]);
        assert!(BinarySource::of_record("https://h", None).is_err(), "a URL without a sum");
    }

    #[tokio::test]
    async fn a_binary_is_staged_only_whole_and_as_announced() {
        let dir = tempfile::tempdir().unwrap();
        let body = elf(62);
        let sum = format!("{:x}", Sha256::digest(&body));
        let chunks = |body: Vec<u8>| {
            futures::stream::iter(
                body.chunks(7).map(|c| Ok::<_, String>(bytes::Bytes::copy_from_slice(c))).collect::<Vec<_>>(),
            )
        };
        let staged_binary = stage(dir.path(), &sum, chunks(body.clone())).await.unwrap();
        assert_eq!(staged_binary, StagedBinary { sha256: sum.clone(), arch: Arch::X86_64, size: 64 });
        assert_eq!(staged(dir.path(), &sum).unwrap(), Some(staged_binary));
        let other = "d".repeat(64);
        assert!(stage(dir.path(), &other, chunks(body.clone())).await.unwrap_err().contains("not dddd"));
        assert_eq!(staged(dir.path(), &other).unwrap(), None);
        let script = b"#!/bin/sh\necho not a binary\n".to_vec();
        let script_sum = format!("{:x}", Sha256::digest(&script));
        assert!(stage(dir.path(), &script_sum, chunks(script)).await.unwrap_err().contains("ELF"));
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "no temporary file is left: {names:?}");
    }
}
