"""Asynchronous continual learner node: replay store, model refits, policy retraining, bundle
pushes.
"""
