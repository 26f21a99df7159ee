//! `meshbench gen gateway`, `gen certs` and `gen grafana`: check the flags and write a gateway's
//! configuration, certificates and a targets file (see `meshbench_lab::gateway`), a lab CA and
//! certificates, or the live stream's Grafana dashboard (`meshbench_live::grafana`).

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context, Result};
use meshbench_lab::contour::objects::Contour;
use meshbench_lab::gateway::{self, CertLayout, GatewayPlan, Target};
use meshbench_lab::istio::objects::Istio;
use meshbench_lab::Program;

use crate::cli::{CertsArg, CertsArgs, GatewayArgs, GatewayFlavor, GrafanaArgs};
use crate::{exit, usage};

/// More routes than this would take minutes to load into most gateways.
const MAX_ROUTES: i64 = 10_000_000;

fn address(flag: &str, value: &str) -> Result<SocketAddr> {
    value.parse().map_err(|_| {
        usage(format!(
            "{flag} '{value}': not an IP address and port; give one like 127.0.0.1:8080"
        ))
    })
}

pub fn gateway(a: GatewayArgs) -> Result<u8> {
    for (flag, v) in [
        ("--domains", a.domains),
        ("--paths", a.paths),
        ("--workers", a.workers),
    ] {
        if v < 1 {
            return Err(usage(format!("{flag} {v}: must be at least 1")));
        }
    }
    if a.domains.saturating_mul(a.paths) > MAX_ROUTES {
        return Err(usage(format!(
            "--domains {} x --paths {} is over {MAX_ROUTES} routes; use fewer",
            a.domains, a.paths
        )));
    }
    let backend = address("--backend", &a.backend)?;
    let admin = address("--admin", &a.admin)?;
    let default_listen = if a.tls {
        "127.0.0.1:8443"
    } else {
        "127.0.0.1:8080"
    };
    let listen = address("--listen", a.listen.as_deref().unwrap_or(default_listen))?;
    // Istio and Contour are rendering targets, not programs the lab starts.
    let istio = Istio::cluster();
    let contour = Contour::default();
    let target: &dyn Target = match a.flavor {
        GatewayFlavor::Nginx => &Program::Nginx,
        GatewayFlavor::Haproxy => &Program::Haproxy,
        GatewayFlavor::Caddy => &Program::Caddy,
        GatewayFlavor::Envoy => &Program::Envoy,
        GatewayFlavor::Istio => &istio,
        GatewayFlavor::Contour => &contour,
    };
    // The flags that cannot work, before anything is written (the lab checks them again).
    if matches!(a.flavor, GatewayFlavor::Contour) && !a.tls {
        return Err(usage(
            "--for contour needs --tls: Contour serves an HTTPProxy's routes on its HTTPS listener only when the virtual host has TLS",
        ));
    }
    if a.http3 && !a.tls {
        return Err(usage("--http3 needs --tls: QUIC is always TLS"));
    }
    if a.http3 && !target.speaks_http3() {
        return Err(usage(format!(
            "--http3: {} with HTTP/3 is not available: {}",
            target.name(),
            target.no_http3()
        )));
    }
    let plan = GatewayPlan {
        domains: a.domains as usize,
        paths: a.paths as usize,
        tls: a.tls,
        http2: !a.no_http2,
        http3: a.http3,
        grpc: a.grpc,
        certs: match a.certs {
            CertsArg::PerDomain => CertLayout::PerDomain,
            CertsArg::Shared => CertLayout::Shared,
        },
        backends: vec![backend],
        listen,
        workers: a.workers as usize,
        // Envoy's admin endpoint (stats and memory); by default Istio's port, on loopback.
        admin: Some(admin),
        out: a.out.clone(),
        access_log: None,
        listeners_file: false,
        rotated: Default::default(),
    };
    let started = Instant::now();
    let generated = gateway::generate(&plan, target)?;
    outln!(
        "wrote {} files for {} ({} routes) into {} in {:.1} s",
        generated.files.len(),
        target.name(),
        generated.routes,
        generated.dir.display(),
        started.elapsed().as_secs_f64()
    );
    for note in &generated.notes {
        outln!("note: {note}");
    }
    // Both commands name everything by absolute path: they work from any directory.
    outln!("{}:", target.start_heading());
    for line in &generated.start {
        outln!("  {line}");
    }
    let meshbench = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "meshbench".into());
    outln!("load every route with:");
    for line in generated.load(&meshbench) {
        outln!("  {line}");
    }
    Ok(exit::OK)
}

pub fn certs(a: CertsArgs) -> Result<u8> {
    if a.names.iter().any(|n| n.trim().is_empty()) {
        return Err(usage(
            "--names: give names separated by commas, e.g. localhost,127.0.0.1",
        ));
    }
    meshbench_lab::pki::write_lab_set(&a.out, &a.names)?;
    outln!(
        "wrote ca.pem, server.pem, server-key.pem (for {}), client.pem, client-key.pem into {}",
        a.names.join(", "),
        a.out.display()
    );
    Ok(exit::OK)
}

pub fn grafana(a: GrafanaArgs) -> Result<u8> {
    let dashboard = meshbench_live::grafana::dashboard(a.datasource_uid.as_deref())
        .map_err(|e| usage(e.to_string()))?;
    let text = serde_json::to_string_pretty(&dashboard)? + "\n";
    match &a.out {
        Some(path) => {
            std::fs::write(path, &text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            errln!(
                "wrote {} ({} panels); import it in Grafana (Dashboards > New > Import)",
                path.display(),
                meshbench_live::grafana::panels().len()
            );
        }
        None => out!("{text}"),
    }
    Ok(exit::OK)
}
