"""The live allocation state in memory: the serialized node (`node`), the state it guards, its
start-up, batched writes, container attachments and topology refreshes."""
