"""The reconcile pass decided whole: the working set it plans on, who answers, and the change one
pass writes."""
