"""The controller side: from a command to a merged run, in three parts with one face each.

- planning: a request -> a planned fleet (every validation and preflight; nothing created)
- fleet: the running fleet (the worker pool, the result collector, the job tracker)
  and the merge at its end
- reporting: progress, cost, usage and what a run returns

planning knows neither of the others; reporting knows planning's types; fleet uses both.
Import from the parts' faces (their __init__), as cli/ does.
"""
