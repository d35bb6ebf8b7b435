//! `sim-kube-proxy ROUTES_FILE`: a simulated cluster's kube-proxy ([`anycloud_sim::kube::run_proxy`]),
//! for this crate's tests, which serve the simulated Kubernetes without the `anycloud` binary
//! (whose hidden `anycloud sim-kube-proxy` command is the same thing).

fn main() -> std::process::ExitCode {
    let Some(routes) = std::env::args_os().nth(1) else {
        eprintln!("usage: sim-kube-proxy ROUTES_FILE");
        return std::process::ExitCode::from(2);
    };
    match anycloud_sim::kube::run_proxy(std::path::Path::new(&routes)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("simulated kube-proxy: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
