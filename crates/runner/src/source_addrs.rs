//! `--source-address`: the local addresses new connections leave from, in turn.
//!
//! A client that opens many connections to one address and port runs out of local ports: the
//! kernel has about 28,000 per (source, destination) pair, and each connection the client
//! closed first holds its port for 60 s in TIME_WAIT. Every extra source address brings a whole
//! range of its own (the engine binds with `IP_BIND_ADDRESS_NO_PORT`, so ports are still picked
//! per 4-tuple). The list is given as addresses and CIDR blocks, comma-separated or repeated:
//! `10.0.0.1,10.0.0.2`, `10.0.1.0/24` (its host addresses, .1 to .254).
//!
//! Contract: [`parse`] is pure; [`check`] asks the OS, through a function handed in, whether
//! each address is one of this machine's, and compares families with the targets'. Every
//! message is one line that names the flag.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::load::LoadError;

/// Most source addresses one run may spread over (a /16 of IPv4 host addresses fits).
pub const MAX_SOURCES: usize = 65_536;

fn bad(given: &str, why: impl std::fmt::Display) -> LoadError {
    LoadError::new(format!("--source-address '{given}': {why}"))
}

/// Every address of the lists, in order, each once.
pub fn parse(lists: &[String]) -> Result<Vec<IpAddr>, LoadError> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for list in lists {
        for item in list.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(bad(
                    list,
                    "an empty item; give addresses or CIDR blocks separated by commas",
                ));
            }
            for ip in expand(item)? {
                if seen.insert(ip) {
                    out.push(ip);
                }
                if out.len() > MAX_SOURCES {
                    return Err(bad(
                        item,
                        format_args!("more than {MAX_SOURCES} addresses; give a narrower block"),
                    ));
                }
            }
        }
    }
    if out.iter().any(IpAddr::is_ipv4) && out.iter().any(IpAddr::is_ipv6) {
        return Err(bad(
            &lists.join(","),
            "mixes IPv4 and IPv6; give the family of the targets",
        ));
    }
    Ok(out)
}

/// One address, or the host addresses of one CIDR block (IPv4 blocks larger than a /31 leave
/// out the network and broadcast addresses).
fn expand(item: &str) -> Result<Vec<IpAddr>, LoadError> {
    let (addr, len) = match item.split_once('/') {
        None => (item, None),
        Some((a, l)) => (a, Some(l)),
    };
    let ip: IpAddr = addr.parse().map_err(|_| {
        bad(
            item,
            "not an IP address or CIDR block (e.g. 10.0.0.2 or 10.0.1.0/24)",
        )
    })?;
    if ip.is_unspecified() {
        return Err(bad(
            item,
            "the unspecified address leaves the choice to the kernel; give this machine's addresses",
        ));
    }
    let Some(len) = len else {
        return Ok(vec![ip]);
    };
    let bits: u32 = if ip.is_ipv4() { 32 } else { 128 };
    let len: u32 = len
        .parse()
        .ok()
        .filter(|&l| l <= bits)
        .ok_or_else(|| bad(item, format_args!("the prefix length must be 0 to {bits}")))?;
    let host_bits = bits - len;
    if host_bits > 17 {
        return Err(bad(
            item,
            format_args!("more than {MAX_SOURCES} addresses; give a narrower block"),
        ));
    }
    let size = 1u128 << host_bits;
    let base = match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    } & !(size - 1);
    let (first, last) = if ip.is_ipv4() && host_bits >= 2 {
        (1, size - 2)
    } else {
        (0, size - 1)
    };
    Ok((first..=last)
        .map(|i| match ip {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from((base + i) as u32)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(base + i)),
        })
        .collect())
}

/// Checks the addresses against the targets (one family) and this machine (`bindable`, e.g.
/// `meshbench_net::socket::check_source`: each must be an address here).
pub fn check(
    sources: &[IpAddr],
    hosts: &[SocketAddr],
    bindable: impl Fn(IpAddr) -> io::Result<()>,
) -> Result<(), LoadError> {
    let Some(first) = sources.first() else {
        return Ok(());
    };
    if let Some(host) = hosts.iter().find(|h| h.is_ipv4() != first.is_ipv4()) {
        let family = |v4: bool| if v4 { "IPv4" } else { "IPv6" };
        return Err(bad(
            &first.to_string(),
            format_args!(
                "{} addresses cannot reach the target {host} ({}); give {} source addresses",
                family(first.is_ipv4()),
                family(host.is_ipv4()),
                family(host.is_ipv4())
            ),
        ));
    }
    for &ip in sources {
        match bindable(ip) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                return Err(bad(
                    &ip.to_string(),
                    format_args!(
                        "not an address of this machine; add it (ip addr add {ip} dev IFACE)"
                    ),
                ));
            }
            Err(e) => return Err(bad(&ip.to_string(), format_args!("cannot bind it: {e}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn lists_and_blocks_expand_in_order_once() {
        // (given, how many, first, last)
        let cases: &[(&[&str], usize, &str, &str)] = &[
            (&["10.0.0.2"], 1, "10.0.0.2", "10.0.0.2"),
            (&["10.0.0.2, 10.0.0.3"], 2, "10.0.0.2", "10.0.0.3"),
            (
                &["10.0.0.2", "10.0.0.3,10.0.0.2"],
                2,
                "10.0.0.2",
                "10.0.0.3",
            ),
            (&["10.0.1.0/24"], 254, "10.0.1.1", "10.0.1.254"),
            (&["10.0.1.77/24"], 254, "10.0.1.1", "10.0.1.254"),
            (&["10.0.1.0/30"], 2, "10.0.1.1", "10.0.1.2"),
            (&["10.0.1.6/31"], 2, "10.0.1.6", "10.0.1.7"),
            (&["10.0.1.6/32"], 1, "10.0.1.6", "10.0.1.6"),
            (&["10.0.0.0/16"], 65_534, "10.0.0.1", "10.0.255.254"),
            (&["fd00::10/126"], 4, "fd00::10", "fd00::13"),
            (&["::1"], 1, "::1", "::1"),
        ];
        for (given, n, first, last) in cases {
            let got = parse(&strings(given)).unwrap_or_else(|e| panic!("{given:?}: {e}"));
            assert_eq!(got.len(), *n, "{given:?}");
            assert_eq!(got[0].to_string(), *first, "{given:?}");
            assert_eq!(got[got.len() - 1].to_string(), *last, "{given:?}");
        }
    }

    #[test]
    fn bad_lists_are_refused_in_one_line() {
        // (given, words of the message)
        let cases: &[(&[&str], &str)] = &[
            (&["10.0.0.300"], "not an IP address"),
            (&["host.example"], "not an IP address"),
            (&["10.0.0.1,,10.0.0.2"], "an empty item"),
            (&[""], "an empty item"),
            (&["10.0.0.0/33"], "0 to 32"),
            (&["10.0.0.0/x"], "0 to 32"),
            (&["fd00::/129"], "0 to 128"),
            (&["10.0.0.0/8"], "narrower block"),
            (&["fd00::/64"], "narrower block"),
            (&["10.0.0.0/16", "10.1.0.0/24"], "more than 65536"),
            (&["0.0.0.0"], "unspecified"),
            (&["10.0.0.1,::1"], "mixes IPv4 and IPv6"),
        ];
        for (given, words) in cases {
            let err = parse(&strings(given)).expect_err(&format!("{given:?} accepted"));
            assert!(err.0.starts_with("--source-address '"), "{err}");
            assert!(err.0.contains(words), "{given:?}: want {words:?} in {err}");
            assert!(!err.0.contains('\n'), "{err}");
        }
    }

    #[test]
    fn addresses_must_suit_the_targets_and_this_machine() {
        let v4: Vec<IpAddr> = vec!["10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap()];
        let target4: SocketAddr = "10.0.9.1:80".parse().unwrap();
        let target6: SocketAddr = "[fd00::1]:80".parse().unwrap();
        let any = |_: IpAddr| Ok(());
        assert!(check(&v4, &[target4], any).is_ok());
        assert!(
            check(&[], &[target6], any).is_ok(),
            "no sources: nothing to check"
        );
        let err = check(&v4, &[target4, target6], any).unwrap_err();
        assert!(
            err.0.contains("cannot reach the target [fd00::1]:80"),
            "{err}"
        );
        let only_first = |ip: IpAddr| {
            if ip == v4[0] {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(libc::EADDRNOTAVAIL))
            }
        };
        let err = check(&v4, &[target4], only_first).unwrap_err();
        assert!(
            err.0
                .starts_with("--source-address '10.0.0.3': not an address of this machine"),
            "{err}"
        );
    }
}
