"""What the compute service does with the host and its records: binding
(:mod:`.binder`, :mod:`.ledger`), releasing (:mod:`.release`), recovery
at start (:mod:`.recovery`), the operator's repairs (:mod:`.repairs`),
parents whose device fails (:mod:`.failing`), and the refresh that
writes the provider tree. Each decides under the records' lock and acts
on the host outside it where it can."""
