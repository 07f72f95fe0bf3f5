"""Pure scoring rules, no run: review labels and findings (``review_scoring``, seed §13),
a skill-eval case's hidden grading (``skill_eval``), its deterministic graders
(``skill_graders``) and the judge model (``judge``, through the egress proxy).

May import: kernel, config, sandbox.
"""
