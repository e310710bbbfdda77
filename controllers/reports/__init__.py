"""The background audit's reports: what the policies would refuse or change among the objects a
cluster already holds, written as one PolicyReport (or OpenReports Report) per namespace."""

from controllers.reports.scanner import AuditScanner

__all__ = ["AuditScanner"]
