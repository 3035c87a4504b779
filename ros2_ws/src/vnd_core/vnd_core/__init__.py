"""ROS-free core of the VND flight stack: dynamics, plant simulator, models, training, learner,
evaluation, bundles.
"""
