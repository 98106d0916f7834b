"""Training the learned policies: PPO, the reward, the teacher and the Gymnasium environments.

It sits above both the decision core (``attentived.agents``, whose networks and policies it
trains) and the simulator (whose engine its environments step), and nothing below imports it.
"""
