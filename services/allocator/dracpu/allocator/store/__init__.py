"""What survives a restart: claim records, CDI specs, their atomic writes, the old checkpoint's
migration and the start-up cross-check."""
