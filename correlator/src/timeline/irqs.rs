//! Device hard IRQs by number: which device's interrupts took the CPU
//! from the server's threads (or kept them waiting for it), named as
//! `/proc/interrupts` names them, with the affinity an `irq-affinity=`
//! experiment would change.

use serde::{Deserialize, Serialize};

use correlator_common::{DEVICE_IRQ_SLOTS, DeviceIrqTime};

/// One device IRQ that took time from target threads, over the run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceIrq {
    /// The IRQ number; [`DeviceIrq::OVERFLOW`] stands for every IRQ from
    /// that number up (the kernel side's table ends there).
    pub irq: u32,
    /// Its handlers' names in `/proc/interrupts` at the end of the run
    /// (e.g. `virtio1-req.0`); empty when the line was gone.
    #[serde(default)]
    pub name: String,
    /// The CPUs it may be delivered to (`/proc/irq/N/smp_affinity_list`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<String>,
    /// Handlers run while a target thread ran on the CPU, and their time.
    pub count: u64,
    pub ns: u64,
    /// Handlers run while a target thread waited runnable for the CPU.
    #[serde(default)]
    pub wait_count: u64,
    #[serde(default)]
    pub wait_ns: u64,
}

impl DeviceIrq {
    /// The kernel side's last slot: IRQ numbers at or above it share it.
    pub const OVERFLOW: u32 = DEVICE_IRQ_SLOTS - 1;

    /// Time the IRQ took from target threads, running or waiting.
    pub fn total_ns(&self) -> u64 {
        self.ns + self.wait_ns
    }

    /// How a report names it: `IRQ 36 (virtio1-req.0)`.
    pub fn label(&self) -> String {
        let number = if self.irq == Self::OVERFLOW {
            format!("IRQs ≥ {}", self.irq)
        } else {
            format!("IRQ {}", self.irq)
        };
        if self.name.is_empty() {
            number
        } else {
            format!("{number} ({})", self.name)
        }
    }
}

/// The table read from the kernel side (IRQ number, time summed over
/// CPUs), named from /proc, most time first.
pub fn named(table: &[(u32, DeviceIrqTime)]) -> Vec<DeviceIrq> {
    let names = std::fs::read_to_string("/proc/interrupts")
        .map(|t| proc_interrupt_names(&t))
        .unwrap_or_default();
    let mut irqs: Vec<DeviceIrq> = table
        .iter()
        .filter(|(_, t)| t.count + t.wait_count > 0)
        .map(|&(irq, t)| DeviceIrq {
            irq,
            name: names
                .iter()
                .find(|(n, _)| *n == irq)
                .map(|(_, name)| name.clone())
                .unwrap_or_default(),
            affinity: std::fs::read_to_string(format!("/proc/irq/{irq}/smp_affinity_list"))
                .ok()
                .map(|s| s.trim().to_string()),
            count: t.count,
            ns: t.ns,
            wait_count: t.wait_count,
            wait_ns: t.wait_ns,
        })
        .collect();
    irqs.sort_by_key(|i| (std::cmp::Reverse(i.total_ns()), i.irq));
    irqs
}

/// Numbered lines of `/proc/interrupts` and their handlers' names: after
/// the per-CPU counts come the chip, the hardware IRQ and its trigger, then
/// the names (`…  PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0`).
/// The layout is fixed by the kernel's show_interrupts(), but the chip
/// and trigger columns vary by chip, so the name is the last field
/// (several handlers sharing a line are joined by ", " there).
pub fn proc_interrupt_names(text: &str) -> Vec<(u32, String)> {
    let mut lines = text.lines();
    let cpus = lines.next().map_or(0, |h| h.split_whitespace().count());
    lines
        .filter_map(|line| {
            let (number, rest) = line.trim_start().split_once(':')?;
            let irq: u32 = number.parse().ok()?;
            let fields: Vec<&str> = rest.split_whitespace().skip(cpus).collect();
            // chip, hwirq-trigger, then names (which may hold ", ").
            let name = fields.get(2..).map(|f| f.join(" ")).unwrap_or_default();
            Some((irq, name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_proc_interrupts() {
        let text = "           CPU0       CPU1       \n  \
24:          1          0  IO-APIC   5-edge      ACPI:Ged\n 36:          0    1424450 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n \
11:          0          0   IO-APIC  11-fasteoi   uhci_hcd:usb1, ehci_hcd:usb2\n\
NMI:          0          0   Non-maskable interrupts\n\
LOC:   27760662   18103252   Local timer interrupts\n";
        assert_eq!(
            proc_interrupt_names(text),
            vec![
                (24, "ACPI:Ged".to_string()),
                (36, "virtio1-req.0".to_string()),
                (11, "uhci_hcd:usb1, ehci_hcd:usb2".to_string()),
            ]
        );
    }

    #[test]
    fn the_last_slot_names_every_irq_above_it() {
        let irq = DeviceIrq {
            irq: DeviceIrq::OVERFLOW,
            ..DeviceIrq::default()
        };
        assert_eq!(irq.label(), format!("IRQs ≥ {}", DeviceIrq::OVERFLOW));
        let named = DeviceIrq {
            irq: 36,
            name: "virtio1-req.0".into(),
            ..DeviceIrq::default()
        };
        assert_eq!(named.label(), "IRQ 36 (virtio1-req.0)");
    }
}
