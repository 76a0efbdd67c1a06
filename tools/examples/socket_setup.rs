//! What a device's socket setup costs the kernel, apart from softverbs' own work: a raw,
//! busy-polled UDP ping-pong of 8-byte datagrams over plain sockets, alternated with the
//! same ping-pong over sockets bound as a device binds its port (`SO_REUSEPORT`, DF, large
//! buffers, GRO turned on and off again as a ping-pong turns it), once as a process alone
//! on the port binds it and once with the steering program a port shared by several
//! processes runs on every datagram. Prints the medians and the medians of the paired
//! differences.
//!
//! `cargo run --release -p softverbs-tools --example socket_setup [PAIRS]`
//!
//! Loopback only, on ports the OS chooses.

use std::io;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softverbs_emu::net::batched_io::set_udp_gro;
use softverbs_emu::net::shared_port::attach_reuseport_cbpf;
use softverbs_emu::net::shared_port::steering::{program, Framing};
use softverbs_emu::net::udp::UdpLink;

/// Round trips per ping-pong, after as many again to warm up.
const ROUND_TRIPS: usize = 20_000;
/// Longest wait for one datagram before the ping-pong gives up.
const LIMIT: Duration = Duration::from_secs(1);

/// The datagram: the first 8 bytes of a BTH whose destination QPN is in slot 1 (byte 5),
/// which a steering program sends to the member at index 0, as it does a member's traffic.
const DATAGRAM: [u8; 8] = [0x04, 0, 0xff, 0xff, 0, 1, 0, 2];

/// The two ends of a ping-pong: plain sockets, or a device's.
enum Pair {
    Plain(UdpSocket, UdpSocket),
    Device(Box<(UdpLink, UdpLink)>),
}

/// How a pair's sockets are set up.
#[derive(Clone, Copy)]
enum Setup {
    Plain,
    /// As a device's port with one process on it: no steering program.
    Alone,
    /// As a device's port shared by processes: the steering program attached.
    Shared,
}

impl Pair {
    fn plain() -> io::Result<Pair> {
        let a = UdpSocket::bind("127.0.0.1:0")?;
        let b = UdpSocket::bind("127.0.0.2:0")?;
        Ok(Pair::Plain(a, b))
    }

    fn new(setup: Setup) -> io::Result<Pair> {
        let steered = match setup {
            Setup::Plain => return Pair::plain(),
            Setup::Alone => false,
            Setup::Shared => true,
        };
        let link = |last: u8| -> io::Result<UdpLink> {
            let link = UdpLink::bind_shared(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)), 0)?;
            if steered {
                // The rule of a member in slot 1 at index 0.
                let steer = program(Framing::UdpPayload, &[(1, 0)])
                    .ok_or_else(|| io::Error::other("no steering program"))?;
                attach_reuseport_cbpf(link.socket(), &steer)?;
            }
            // As after a ping-pong turned GRO off (see gro_mode); refused where unsupported.
            let _ = set_udp_gro(link.socket(), false);
            Ok(link)
        };
        Ok(Pair::Device(Box::new((link(1)?, link(2)?))))
    }

    fn sockets(&self) -> (&UdpSocket, &UdpSocket) {
        match self {
            Pair::Plain(a, b) => (a, b),
            Pair::Device(pair) => (pair.0.socket(), pair.1.socket()),
        }
    }
}

/// Busy-polls `sock` until a datagram arrives.
fn receive(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<()> {
    let started = Instant::now();
    loop {
        match sock.recv_from(buf) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if started.elapsed() > LIMIT {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
}

/// The median half round trip of a ping-pong over `pair`, microseconds.
fn ping_pong(pair: &Pair) -> io::Result<f64> {
    let (a, b) = pair.sockets();
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
    let stop = Arc::new(AtomicBool::new(false));
    let mut samples = Vec::with_capacity(ROUND_TRIPS);
    std::thread::scope(|scope| -> io::Result<()> {
        let echo_stop = stop.clone();
        let echo = scope.spawn(move || -> io::Result<()> {
            let mut buf = [0u8; 64];
            while !echo_stop.load(Ordering::Relaxed) {
                match receive(b, &mut buf) {
                    Ok(()) => {
                        b.send_to(&DATAGRAM, a_addr)?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        let mut buf = [0u8; 64];
        let result = (0..2 * ROUND_TRIPS).try_for_each(|i| {
            let started = Instant::now();
            a.send_to(&DATAGRAM, b_addr)?;
            receive(a, &mut buf)?;
            if i >= ROUND_TRIPS {
                samples.push(started.elapsed().as_nanos() as f64 / 2000.0);
            }
            Ok(())
        });
        stop.store(true, Ordering::Relaxed);
        echo.join()
            .map_err(|_| io::Error::other("echo thread panicked"))??;
        result
    })?;
    Ok(median(&mut samples))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> io::Result<()> {
    let pairs: usize = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .map_err(|_| io::Error::other(format!("PAIRS must be a number, not {n}")))?,
        None => 15,
    };
    let setups = [Setup::Plain, Setup::Alone, Setup::Shared];
    let mut medians: [Vec<f64>; 3] = Default::default();
    for i in 0..pairs {
        // Each round in another order, so that no setup gains from its place.
        let mut round = [0.0; 3];
        for k in 0..3 {
            let which = (i + k) % 3;
            round[which] = ping_pong(&Pair::new(setups[which])?)?;
        }
        println!(
            "round {:>2}: plain {:.3} us, alone {:.3} us, shared {:.3} us",
            i + 1,
            round[0],
            round[1],
            round[2]
        );
        for k in 0..3 {
            medians[k].push(round[k]);
        }
    }
    let diff = |k: usize| -> (f64, usize) {
        let mut d: Vec<f64> = (0..pairs).map(|i| medians[k][i] - medians[0][i]).collect();
        let slower = d.iter().filter(|x| **x > 0.0).count();
        (median(&mut d), slower)
    };
    let ((alone, alone_slower), (shared, shared_slower)) = (diff(1), diff(2));
    println!(
        "median half round trip over {pairs} rounds: plain sockets {:.3} us; a device's sockets \
         alone on the port {:.3} us ({alone:+.3} us, slower in {alone_slower}); shared, \
         with the steering program {:.3} us ({shared:+.3} us, slower in {shared_slower})",
        median(&mut medians[0].clone()),
        median(&mut medians[1].clone()),
        median(&mut medians[2].clone()),
    );
    Ok(())
}
