//! A workload's spec as a user gives it (image, command, environment, CPUs, memory), checked
//! before anything is stored, and turned into the Kubernetes quantities its objects carry.

use crate::db::spec::EnvVar;
use crate::db::spec::Spec;

/// Most CPUs one container may ask for.
const MAX_MILLICPUS: u64 = 256_000;
/// Most memory one container may ask for: 4 TiB.
const MAX_MEMORY_BYTES: u128 = 4 << 40;
/// Least memory one container may ask for: 4 MiB (the kubelet refuses less).
const MIN_MEMORY_BYTES: u128 = 4 << 20;

/// Checks a workload's parts and returns its spec: env duplicates resolved (the last wins, in
/// the position of the first), CPUs and memory as Kubernetes quantities. The error says what was
/// wrong and what to do.
pub fn check(
    image: &str,
    command: &[String],
    env: &[EnvVar],
    cpus: Option<&str>,
    memory: Option<&str>,
) -> Result<Spec, String> {
    check_image(image)?;
    if command.is_empty() || command[0].trim().is_empty() {
        return Err(format!(
            "no command to run in `{image}`: give it after `--`, for example `anycloud job {image} --cluster NAME -- \
             python batch.py`"
        ));
    }
    let mut merged: Vec<EnvVar> = Vec::new();
    for var in env {
        check_env_name(&var.name)?;
        match merged.iter_mut().find(|seen| seen.name == var.name) {
            Some(seen) => seen.value = var.value.clone(),
            None => merged.push(var.clone()),
        }
    }
    Ok(Spec {
        image: image.to_owned(),
        command: command.to_vec(),
        env: merged,
        cpus: cpus.map(cpu_quantity).transpose()?,
        memory: memory.map(memory_quantity).transpose()?,
        secrets: Vec::new(),
    })
}

/// An image reference as Docker parses it: `[registry[:port]/]path[:tag][@digest]`, lowercase
/// path components of letters, digits and `._-` separators.
fn check_image(image: &str) -> Result<(), String> {
    let invalid = |why: &str| {
        Err(format!(
            "image `{image}` is not a valid image reference ({why}); use a reference such as \
             `ghcr.io/acme/batch:latest` or `python:3.12`"
        ))
    };
    if image.is_empty() {
        return invalid("it is empty");
    }
    if image.len() > 255 {
        return invalid("it is longer than 255 characters");
    }
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest {
        let Some((algorithm, hex)) = digest.split_once(':') else { return invalid("its digest has no algorithm") };
        if algorithm.is_empty() || hex.len() < 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return invalid("its digest is not `sha256:` and hex");
        }
    }
    let (name, tag) = match rest.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, Some(tag)),
        _ => (rest, None),
    };
    if let Some(tag) = tag {
        let valid = !tag.is_empty()
            && tag.len() <= 128
            && tag.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            && !tag.starts_with(['.', '-']);
        if !valid {
            return invalid("its tag is not 1 to 128 letters, digits, `.`, `_` or `-`");
        }
    }
    let mut components: Vec<&str> = name.split('/').collect();
    if components.len() > 1 && (components[0].contains(['.', ':']) || components[0] == "localhost") {
        let registry = components.remove(0);
        let host_ok = registry.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:".contains(&b));
        if !host_ok {
            return invalid("its registry is not a host name");
        }
    }
    for component in components {
        let separators_ok = !component.starts_with(['.', '_', '-']) && !component.ends_with(['.', '_', '-']);
        let chars_ok = component.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
        if component.is_empty() || !separators_ok || !chars_ok {
            return invalid("its path must be lowercase letters, digits and `.`, `_` or `-` between them");
        }
    }
    Ok(())
}

/// The registry host an image is pulled from, by Docker's rule: the reference's first path
/// component when it holds a `.` or a `:` or is `localhost`, else Docker Hub (`docker.io`).
pub fn registry_host(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first.to_ascii_lowercase(),
        _ => "docker.io".to_owned(),
    }
}

fn check_env_name(name: &str) -> Result<(), String> {
    let valid = name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(format!(
            "environment variable name `{name}` is not valid: use letters, digits and `_`, not starting with a digit \
             (as in `-e BATCH_SIZE=64`)"
        ));
    }
    Ok(())
}

/// `--cpus`: a positive decimal (`0.5`, `2`) or millicores (`1500m`), as millicores.
fn cpu_quantity(text: &str) -> Result<String, String> {
    let invalid = || {
        format!(
            "--cpus `{text}` is not a CPU count: give a positive number such as `0.5` or `2` (at most {})",
            MAX_MILLICPUS / 1000
        )
    };
    let millis = match text.strip_suffix('m') {
        Some(millis) => millis.parse::<u64>().map_err(|_| invalid())?,
        None => {
            let value: f64 = text.parse().map_err(|_| invalid())?;
            if !value.is_finite() || value < 0.0 {
                return Err(invalid());
            }
            (value * 1000.0).round() as u64
        }
    };
    if millis == 0 || millis > MAX_MILLICPUS {
        return Err(invalid());
    }
    Ok(if millis % 1000 == 0 { (millis / 1000).to_string() } else { format!("{millis}m") })
}

/// `--memory`: a number with a unit (`512Mi`, `2Gi`, `1G`, `500M`) or bytes, between 4 MiB and
/// 4 TiB, as a Kubernetes quantity.
fn memory_quantity(text: &str) -> Result<String, String> {
    let invalid = |why: &str| {
        format!(
            "--memory `{text}` {why}: give a size such as `512Mi`, `2Gi` or `1G`, between 4Mi and 4Ti, that the \
             cluster's VMs can hold"
        )
    };
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u128 = digits.parse().map_err(|_| invalid("is not a size"))?;
    let multiplier: u128 = match unit {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return Err(invalid("has an unknown unit")),
    };
    let bytes = number.saturating_mul(multiplier);
    if bytes < MIN_MEMORY_BYTES {
        return Err(invalid("is too small"));
    }
    if bytes > MAX_MEMORY_BYTES {
        return Err(invalid("is impossibly large"));
    }
    Ok(format!("{number}{}", if unit == "K" { "k" } else { unit }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|part| (*part).to_owned()).collect()
    }

    #[test]
    fn image_references_as_docker_parses_them() {
        for good in [
            "python",
            "python:3.12",
            "ghcr.io/acme/batch:latest",
            "localhost:5000/a/b",
            "registry.example.com:443/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(check_image(good).is_ok(), "{good}");
        }
        for bad in ["", "Python", "ghcr.io/acme/Batch", "a//b", "a:", "a:-x", "-a", "a@sha256:xyz", "a b"] {
            let err = check_image(bad).unwrap_err();
            assert!(err.contains("is not a valid image reference"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_registry_host_is_docker_s() {
        assert_eq!(registry_host("ghcr.io/acme/batch:latest"), "ghcr.io");
        assert_eq!(registry_host("localhost:5000/a/b"), "localhost:5000");
        assert_eq!(registry_host("localhost/a"), "localhost");
        assert_eq!(registry_host("registry.example.com:443/team/app"), "registry.example.com:443");
        assert_eq!(registry_host("python:3.12"), "docker.io");
        assert_eq!(registry_host("acme/batch"), "docker.io");
    }

    #[test]
    fn quantities_become_kubernetes_quantities() {
        assert_eq!(cpu_quantity("0.5").unwrap(), "500m");
        assert_eq!(cpu_quantity("2").unwrap(), "2");
        assert_eq!(cpu_quantity("1500m").unwrap(), "1500m");
        for bad in ["0", "-1", "abc", "0.0001", "1000", "NaN"] {
            assert!(cpu_quantity(bad).is_err(), "{bad}");
        }
        assert_eq!(memory_quantity("512Mi").unwrap(), "512Mi");
        assert_eq!(memory_quantity("1G").unwrap(), "1G");
        assert_eq!(memory_quantity("8000000").unwrap(), "8000000");
        for bad in ["0", "1Mi", "5Pi", "9999Ti", "lots", "1.5Gi", "-1Gi"] {
            assert!(memory_quantity(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_last_duplicate_wins_and_bad_names_are_refused() {
        let env = [
            EnvVar { name: "A".into(), value: "1".into() },
            EnvVar { name: "B".into(), value: "2".into() },
            EnvVar { name: "A".into(), value: "3".into() },
        ];
        let spec = check("python", &words(&["python", "x.py"]), &env, None, None).unwrap();
        assert_eq!(spec.env, vec![EnvVar { name: "A".into(), value: "3".into() }, env[1].clone()]);
        let bad = [EnvVar { name: "1A".into(), value: String::new() }];
        assert!(check("python", &words(&["x"]), &bad, None, None).unwrap_err().contains("`1A` is not valid"));
        assert!(check("python", &[], &[], None, None).unwrap_err().starts_with("no command"));
    }
}
