"""Approvals: ApprovalStore (decisions), ApprovalPolicy (per-run rules), ApprovalGuard, audit."""
