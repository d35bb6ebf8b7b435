//! A small disk of its own for a test that fills it: a tmpfs of a given size mounted on a
//! temporary directory (unmounted when dropped), and a ballast file that takes every free byte
//! on it until it is removed. Mounting needs root, as the tests run in CI; without it the test
//! fails and says so rather than proving nothing.
//!
//! One copy, shared: the engine's tests include it as `support::tmpfs`, the end-to-end tests
//! crate by path (`tests/src/lib.rs`).

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a directory (a temporary one, or one the test names).
pub struct Tmpfs {
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_bytes` on a new temporary directory.
    pub fn mount(size_bytes: u64) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory to mount on");
        let mut disk = Self::mount_on(dir.path(), size_bytes);
        disk._dir = Some(dir);
        disk
    }

    /// Mounts a tmpfs of `size_bytes` on the existing directory `path`, hiding what it holds.
    pub fn mount_on(path: &Path, size_bytes: u64) -> Self {
        let options = format!("size={size_bytes}");
        run("mount", &["-t", "tmpfs", "-o", &options, "tmpfs", &path.display().to_string()]);
        Self { path: path.to_owned(), _dir: None }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a ballast file until the disk is full, to the last byte.
    pub fn fill(&self) -> Ballast {
        let path = self.path().join("ballast");
        let mut file = File::create(&path).expect("create the ballast file");
        let chunk = vec![0u8; 64 * 1024];
        let mut size = chunk.len();
        loop {
            match file.write(&chunk[..size]) {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) if err.kind() == ErrorKind::StorageFull && size > 1 => size /= 2,
                Err(err) if err.kind() == ErrorKind::StorageFull => break,
                Err(err) => panic!("filling {}: {err}", path.display()),
            }
        }
        Ballast { path }
    }

    /// Remounts it read-only; the kernel refuses (`EBUSY`) while a file on it is open for
    /// writing.
    pub fn remount(&self, options: &str) -> Result<(), String> {
        try_run("mount", &["-o", &format!("remount,{options}"), &self.path().display().to_string()])
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a process the test started may still hold a file on it.
        let _ = try_run("umount", &["-l", &self.path().display().to_string()]);
    }
}

/// The file that fills a [`Tmpfs`].
pub struct Ballast {
    path: PathBuf,
}

impl Ballast {
    /// Removes it: the disk has room again.
    pub fn remove(self) {
        std::fs::remove_file(&self.path).expect("remove the ballast file");
    }
}

fn run(program: &str, args: &[&str]) {
    if let Err(err) = try_run(program, args) {
        panic!("this test mounts a small tmpfs of its own to fill it, which needs root: {err}");
    }
}

fn try_run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|err| format!("running {program}: {err}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}
