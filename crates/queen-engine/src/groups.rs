//! Consumer groups: queue mode, the streams runners' groups, and where a new
//! group starts reading.

pub use queen_wire::QUEUE_MODE;

/// The consumer groups of streams runners: `streams.<query id>`.
pub const STREAMS_GROUP_PREFIX: &str = "streams.";

/// Where a new consumer group starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubscriptionMode {
    /// From the first message still in the queue (`all`, `from_beginning`).
    All,
    /// After the last message pushed before the group's first pop, in every
    /// partition (Queen 1.6's default).
    #[default]
    New,
}

impl SubscriptionMode {
    /// The name the pop routes and `DEFAULT_SUBSCRIPTION_MODE` use.
    pub fn as_str(self) -> &'static str {
        match self {
            SubscriptionMode::All => "all",
            SubscriptionMode::New => "new",
        }
    }
}

impl std::str::FromStr for SubscriptionMode {
    type Err = String;

    /// Queen's spellings; an empty value is Queen's old default, `all`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "all" | "from_beginning" => Ok(SubscriptionMode::All),
            "new" | "new-only" | "new_only" => Ok(SubscriptionMode::New),
            other => Err(format!(
                "unknown subscription mode {other:?}: expected all, from_beginning, new or new-only"
            )),
        }
    }
}
