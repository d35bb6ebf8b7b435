//! The CPU architectures a VM runs and a binary is built for.

use serde::{Deserialize, Serialize};

/// A CPU architecture an `anycloud` binary is built for, named as `uname -m` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Arch {
    /// `x86_64` (AWS `x86_64`, GCP `X86_64`).
    #[serde(rename = "x86_64")]
    X86_64,
    /// `aarch64` (AWS `arm64`, GCP `ARM64`).
    #[serde(rename = "aarch64")]
    Aarch64,
}

impl Arch {
    /// The name `uname -m` prints on a Linux VM of this architecture.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        }
    }

    /// Parses a name as operators and providers write it: `x86_64`/`amd64`/`X86_64`,
    /// `aarch64`/`arm64`/`ARM64`. Other architectures (i386, AWS's `x86_64_mac`) are `None`.
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "x86_64" | "amd64" | "x86-64" => Some(Self::X86_64),
            "aarch64" | "arm64" => Some(Self::Aarch64),
            _ => None,
        }
    }

    /// The architecture this binary was built for.
    pub fn current() -> Option<Self> {
        Self::parse(std::env::consts::ARCH)
    }

    /// The architecture a Linux executable runs on, from its ELF header (`e_machine`: 62 is
    /// x86-64, 183 AArch64); an error says why the file is not one.
    pub fn of_elf(header: &[u8]) -> Result<Self, String> {
        if header.len() < 20 || &header[..4] != b"\x7fELF" {
            return Err("it is not a Linux executable (no ELF header)".to_owned());
        }
        if header[4] != 2 {
            return Err("it is a 32-bit ELF file; the VMs run 64-bit Linux".to_owned());
        }
        let machine = match header[5] {
            1 => u16::from_le_bytes([header[18], header[19]]),
            2 => u16::from_be_bytes([header[18], header[19]]),
            other => return Err(format!("its ELF header names byte order {other}")),
        };
        match machine {
            62 => Ok(Self::X86_64),
            183 => Ok(Self::Aarch64),
            other => Err(format!("it is built for ELF machine {other}, neither x86_64 (62) nor aarch64 (183)")),
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
