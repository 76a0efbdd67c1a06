//! Run-time backend selection (issue 6): the device lists of each provider say which
//! backend serves every device, `open_with` honours the choice, and choosing the hardware
//! backend gives typed errors (not panics) where it is not built in or has no such device.
//!
//! File number 62: devices on 127.10.62.n.

use softverbs::select::Provider;
use softverbs::{all_devices, devices_for, Context, DeviceConfig, VerbsError};
use softverbs_conformance::{device_name, register_and_open, test_ip};

const FILE: u8 = 62;

#[test]
fn emulated_devices_are_listed_as_emu_and_open_on_the_emulator() {
    let name = device_name(FILE, 1);
    drop(register_and_open(DeviceConfig::new(
        name.clone(),
        test_ip(FILE, 1),
    )));
    let emu = devices_for(Provider::Emu).expect("emu list");
    let me = emu
        .iter()
        .find(|d| d.name == name)
        .expect("registered device listed");
    assert_eq!(me.backend, "emu");
    assert!(emu.iter().all(|d| d.backend == "emu"), "{emu:?}");
    // The list of both kinds has it too, and every entry says its backend.
    let all = all_devices().expect("all devices");
    assert!(
        all.iter().any(|d| d.name == name && d.backend == "emu"),
        "{all:?}"
    );
    assert!(
        all.iter().all(|d| d.backend == "emu" || d.backend == "hw"),
        "{all:?}"
    );
    // auto opens a registered emulated device on the emulator, whatever hardware exists.
    for p in [Provider::Emu, Provider::Auto] {
        let ctx = Context::open_with(&name, p).expect("open");
        assert_eq!(ctx.provider(), Provider::Emu);
        assert!(ctx.emulator().is_some());
    }
}

#[test]
fn auto_lists_hardware_only_when_there_is_some() {
    let auto = devices_for(Provider::Auto).expect("auto list");
    let hw_present = cfg!(feature = "hw") && devices_for(Provider::Hw).is_ok_and(|l| !l.is_empty());
    let want = if hw_present { "hw" } else { "emu" };
    assert!(auto.iter().all(|d| d.backend == want), "{auto:?}");
    assert_eq!(
        Provider::Auto.resolve().unwrap(),
        if hw_present {
            Provider::Hw
        } else {
            Provider::Emu
        }
    );
}

#[test]
fn the_hardware_backend_refuses_with_typed_errors() {
    let err = match Context::open_with("no-such-rdma-device", Provider::Hw) {
        Ok(_) => panic!("opened a device that does not exist"),
        Err(e) => e,
    };
    if cfg!(feature = "hw") {
        // ibv_open_device of an unknown name: ENODEV, a NotFound.
        assert!(matches!(err, VerbsError::NotFound(_)), "{err:?}");
    } else {
        assert_eq!(err.errno(), libc::EOPNOTSUPP, "{err}");
        assert_eq!(
            devices_for(Provider::Hw).unwrap_err().errno(),
            libc::EOPNOTSUPP
        );
    }
    // An emulated device is not a hardware one.
    let name = device_name(FILE, 2);
    drop(register_and_open(DeviceConfig::new(
        name.clone(),
        test_ip(FILE, 2),
    )));
    assert!(Context::open_with(&name, Provider::Hw).is_err());
    assert_eq!(Provider::parse("nic").unwrap_err().errno(), libc::EINVAL);
}
