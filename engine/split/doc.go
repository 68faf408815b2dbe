// Package split is how a model is split among ranks: pipeline shards of
// whole blocks (ShardTensors, WriteShard), tensor-parallel slices of every
// block (PlanTP, WriteTPSlice), and the byte ranges of the model file
// each one is cut from (ShardRanges, TPRanges), so that a node can fetch
// only its part.
//
// What a rank's file holds is engine/model's: the orrery.shard and
// orrery.tp keys written here are read back by model.FromGGUF into
// Config.ShardFirst, ShardLast and TP (a model.TPSlice). This package
// plans and cuts; it never decides which node gets which part
// (engine/placement does).
package split
