//! The protobuf messages the scrape format (`io.prometheus.client`) and remote write
//! (`prometheus`) define alike, field for field: a label and a native histogram's bucket span.
//! Written once; each protocol's module re-exports them under its own names.

use prost::Message;

/// A label: name and value.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A run of consecutive native buckets: `offset` from index 0 for the first span, from the
/// end of the span before for the others; `length` buckets.
#[derive(Clone, PartialEq, Message)]
pub struct BucketSpan {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint32, tag = "2")]
    pub length: u32,
}
