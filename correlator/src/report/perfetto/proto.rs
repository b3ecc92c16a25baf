//! The few messages of Perfetto's trace format that correlator writes,
//! declared by hand with prost's derive (field numbers and types from
//! `protos/perfetto/trace/perfetto_trace.proto`; the test decodes our
//! output with the official `perfetto_trace_pb2`). Declaring them here
//! avoids protoc and the 10,000-line schema for a dozen messages.

/// `TracePacket`: one entry of the trace (`Trace.packet`, field 1).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(oneof = "Data", tags = "6, 11, 60")]
    pub data: Option<Data>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    #[prost(message, tag = "6")]
    ClockSnapshot(ClockSnapshot),
    #[prost(message, tag = "11")]
    TrackEvent(TrackEvent),
    #[prost(message, tag = "60")]
    TrackDescriptor(TrackDescriptor),
}

/// `TracePacket.sequence_flags`: SEQ_INCREMENTAL_STATE_CLEARED.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;

/// `BuiltinClock` values.
pub const CLOCK_REALTIME: u32 = 1;
pub const CLOCK_MONOTONIC: u32 = 3;
pub const CLOCK_BOOTTIME: u32 = 6;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "14")]
    pub description: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
    /// `ChildTracksOrdering`: 3 = EXPLICIT (by `sibling_order_rank`).
    #[prost(int32, optional, tag = "11")]
    pub child_ordering: Option<i32>,
    #[prost(int32, optional, tag = "12")]
    pub sibling_order_rank: Option<i32>,
}

pub const CHILD_ORDERING_EXPLICIT: i32 = 3;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    pub tid: Option<i32>,
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {
    /// `Unit`: 1 = TIME_NS, 2 = COUNT.
    #[prost(int32, optional, tag = "3")]
    pub unit: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub unit_name: Option<String>,
}

pub const UNIT_TIME_NS: i32 = 1;
pub const UNIT_COUNT: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    /// `Type`: SLICE_BEGIN 1, SLICE_END 2, INSTANT 3, COUNTER 4.
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

pub const SLICE_BEGIN: i32 = 1;
pub const SLICE_END: i32 = 2;
pub const INSTANT: i32 = 3;
pub const COUNTER: i32 = 4;

#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
    #[prost(oneof = "Value", tags = "2, 3, 4, 5, 6")]
    pub value: Option<Value>,
    #[prost(message, repeated, tag = "11")]
    pub dict_entries: Vec<DebugAnnotation>,
    #[prost(message, repeated, tag = "12")]
    pub array_values: Vec<DebugAnnotation>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(uint64, tag = "3")]
    Uint(u64),
    #[prost(int64, tag = "4")]
    Int(i64),
    #[prost(double, tag = "5")]
    Double(f64),
    #[prost(string, tag = "6")]
    String(String),
}
