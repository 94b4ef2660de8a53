"""``python -m sdpaxos.modelcheck``: validate seeded runs' traces with TLC."""

from sdpaxos.modelcheck import main

raise SystemExit(main())
