//! Test knobs: ways to make the device misbehave on purpose.

/// Forces a command status (see [`Faults::fail_command`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailCommand {
    /// Opcode to fail.
    pub opcode: u16,
    /// Output `status` to return.
    pub status: u8,
    /// Output `syndrome` to return.
    pub syndrome: u32,
    /// How many commands to fail; `None` = every one. The knob clears itself when it runs out.
    pub times: Option<u32>,
}

/// A hook that sees (and may change) an output message before it is written back.
/// Arguments: the opcode and the whole output message (16-byte header included, `outlen` bytes).
pub type OutputHook = Box<dyn FnMut(u16, &mut Vec<u8>) + Send>;

/// Test knobs; all fields public. `Faults::default()` means a well-behaved device.
#[derive(Default)]
pub struct Faults {
    /// Commands with this opcode complete with this status and syndrome and have no other
    /// effect.
    pub fail_command: Option<FailCommand>,
    /// Commands with this opcode (`.0`) complete with this delivery status (`.1`) and are not
    /// executed.
    pub fail_delivery: Option<(u16, u8)>,
    /// Entries handed over are never completed (they stay hardware-owned).
    pub stall_commands: bool,
    /// The `initializing` bit never clears.
    pub never_ready: bool,
    /// Runs on every output message before it is scattered (lets a test make the device lie).
    pub output_hook: Option<OutputHook>,
    /// For this opcode, the first output mailbox gets a wrong `token` and `block_num`.
    pub corrupt_output_mailbox: Option<u16>,
    /// A page-request storm: every MANAGE_PAGES is answered with another PAGE_REQUEST (after
    /// a GIVE of `n` pages the device wants `n` back, after a TAKE it wants pages again), on
    /// every EQ subscribed to page requests, for as long as the driver keeps serving them.
    pub page_storm: bool,
}

impl core::fmt::Debug for Faults {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Faults")
            .field("fail_command", &self.fail_command)
            .field("fail_delivery", &self.fail_delivery)
            .field("stall_commands", &self.stall_commands)
            .field("never_ready", &self.never_ready)
            .field("output_hook", &self.output_hook.is_some())
            .field("corrupt_output_mailbox", &self.corrupt_output_mailbox)
            .field("page_storm", &self.page_storm)
            .finish()
    }
}
